"""Work handed to Celery by task name finds its task in any process, not only in a worker: a
management command (``seed_demo`` in ``make run``) once logged ``NotRegistered`` for every
notification it wrote, since nothing had imported the apps' task modules."""

from __future__ import annotations

import os
import subprocess
import sys

from clusters.outbox import PUSH_TASK
from notifications.outbox import FAN_OUT_TASK


def test_a_process_that_is_not_a_worker_finds_the_tasks_it_hands_work_to() -> None:
    code = (
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'gpuportal.settings'); django.setup(); "
        "from celery import current_app; from kernel.task_handover import task_registered; "
        f"names = [{FAN_OUT_TASK!r}, {PUSH_TASK!r}]; "
        "print([name in current_app.tasks for name in names]); "
        "print([task_registered(name).name == name for name in names])"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "GPUPORTAL_DEBUG": "true"}, check=True)
    before, after = found.stdout.strip().splitlines()[-2:]
    assert before.startswith("[False,"), "the test proves nothing if the process already had the fan-out task"
    assert after == "[True, True]", found.stderr

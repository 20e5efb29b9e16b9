"""Settings of the web processes and Celery workers that ``tests/procs/test_many_processes.py``
starts: the test settings, tasks through the broker (``CELERY_BROKER_URL``) on a queue of the run's
own, and the URL table with the test-only check of the kept placement state (``tests/procs/urls.py``).
Nothing outside ``tests/`` names this module, so the check is never served in production."""

from __future__ import annotations

import os

from gpuportal.settings_test import *  # noqa: F403

CELERY_TASK_ALWAYS_EAGER = False
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("GPUPORTAL_TEST_QUEUE", "celery")
ROOT_URLCONF = "tests.procs.urls"

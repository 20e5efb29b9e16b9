"""The checkpoint heartbeat of the embedded default: without a broker there is no beat, so the
serving process publishes checkpoints itself at ``GPUPORTAL_AUDIT_CHECKPOINT_INTERVAL_SECONDS``;
several serving processes publish one checkpoint per interval between them, and the thread stops
cleanly."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from celery import current_app

from audit import heartbeat
from audit.heartbeat import CheckpointHeartbeat, checkpoint_heartbeat_publish
from audit.integrity.store import CheckpointFolder
from audit.models import AuditCheckpoint
from kernel.clock import clock_advance, clock_now, clock_set
from tests.audit.conftest import record

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_a_checkpoint_is_published_once_per_interval_however_many_publishers(
    django_capture_on_commit_callbacks: Any, folder: CheckpointFolder
) -> None:
    clock_set(clock_now())
    with django_capture_on_commit_callbacks(execute=True):
        first = checkpoint_heartbeat_publish(interval_seconds=60)
    assert first is not None and first.number == 1 and folder.numbers() == [1]
    # Another serving process ticks a moment later: the checkpoint is fresh, nothing is due.
    clock_advance(datetime.timedelta(seconds=20))
    record()
    assert checkpoint_heartbeat_publish(interval_seconds=60) is None
    assert AuditCheckpoint.objects.count() == 1
    # Near the end of the interval (its last tenth) the next tick publishes, with the new event.
    clock_advance(datetime.timedelta(seconds=34))
    with django_capture_on_commit_callbacks(execute=True):
        second = checkpoint_heartbeat_publish(interval_seconds=60)
    assert second is not None and (second.number, second.size) == (2, first.size + 1)
    assert folder.numbers() == [1, 2]


@pytest.mark.django_db
def test_a_heartbeat_writes_the_checkpoints_the_folder_missed(
    django_capture_on_commit_callbacks: Any, folder: CheckpointFolder
) -> None:
    clock_set(clock_now())
    checkpoint_heartbeat_publish(interval_seconds=60)  # its external write never ran
    assert folder.numbers() == []
    clock_advance(datetime.timedelta(seconds=60))
    with django_capture_on_commit_callbacks(execute=True):
        checkpoint_heartbeat_publish(interval_seconds=60)
    assert folder.numbers() == [1, 2]


def test_the_thread_runs_every_interval_and_stops_cleanly(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[float] = []
    monkeypatch.setattr(heartbeat, "checkpoint_heartbeat_publish", lambda *, interval_seconds: runs.append(interval_seconds))
    beat = CheckpointHeartbeat(interval=0.02).start()
    deadline = time.monotonic() + 10
    while len(runs) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    beat.stop(timeout=5)
    assert not beat.running and len(runs) >= 3 and set(runs) == {0.02}
    done = len(runs)
    time.sleep(0.1)
    assert len(runs) == done  # nothing after the stop


def test_a_failed_run_is_logged_and_the_next_one_runs(monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    calls = []

    def failing(*, interval_seconds: float) -> None:
        calls.append(interval_seconds)
        raise RuntimeError("database away")

    monkeypatch.setattr(heartbeat, "checkpoint_heartbeat_publish", failing)
    beat = CheckpointHeartbeat(interval=60)
    assert beat.run_once() is None and beat.run_once() is None
    assert len(calls) == 2 and "audit checkpoint heartbeat failed" in caplog.text


def test_the_heartbeat_starts_once_per_process_and_only_for_in_process_tasks(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.GPUPORTAL_AUDIT_CHECKPOINT_INTERVAL_SECONDS = 7
    started: list[CheckpointHeartbeat] = []

    def start(self: CheckpointHeartbeat) -> CheckpointHeartbeat:
        started.append(self)
        return self

    monkeypatch.setattr(CheckpointHeartbeat, "start", start)
    monkeypatch.setattr(CheckpointHeartbeat, "running", property(lambda self: True))
    monkeypatch.setattr(heartbeat, "_heartbeat", None)
    monkeypatch.setattr("audit.heartbeat.atexit.register", lambda *args, **kwargs: None)
    eager = current_app.conf.task_always_eager
    try:
        current_app.conf.task_always_eager = False
        assert heartbeat.audit_heartbeat_start() is None  # a broker: beat publishes
        current_app.conf.task_always_eager = True
        first = heartbeat.audit_heartbeat_start()
        assert first is not None and heartbeat.audit_heartbeat_start() is first
    finally:
        current_app.conf.task_always_eager = eager
    assert started == [first] and first.interval == 7.0


def test_the_serving_process_of_the_embedded_default_runs_the_heartbeat() -> None:
    """``make run`` serves the WSGI application: loading it without a broker starts the heartbeat
    at the configured interval (the publishing itself is replaced: this checks the wiring)."""
    code = (
        "import json, threading, django\n"
        "django.setup()\n"
        "from audit import heartbeat\n"
        "heartbeat.checkpoint_heartbeat_publish = lambda *, interval_seconds: None\n"
        "import gpuportal.wsgi\n"
        "beat = heartbeat._heartbeat\n"
        "print(json.dumps({'threads': sorted(t.name for t in threading.enumerate()),\n"
        "                  'interval': beat.interval if beat else None}))\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "gpuportal.settings", "GPUPORTAL_DEBUG": "true",
           "GPUPORTAL_AUDIT_CHECKPOINT_INTERVAL_SECONDS": "3"}
    env.pop("CELERY_BROKER_URL", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert "gpuportal-audit-heartbeat" in found["threads"] and found["interval"] == 3.0


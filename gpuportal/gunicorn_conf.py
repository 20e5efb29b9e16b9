"""gunicorn's configuration (``gunicorn -c python:gpuportal.gunicorn_conf``).

With ``PROMETHEUS_MULTIPROC_DIR`` set (docs/observability.md), every worker process writes its
request counters there and ``/metrics`` adds them up: the folder is emptied when the master starts
(counters of an earlier run must not be added in) and a dead worker's live gauges are dropped.

Logs: gunicorn's own records go through the portal's logging configuration (``settings.LOGGING``:
``GPUPORTAL_LOG_FORMAT``, ``GPUPORTAL_LOG_LEVEL``), and its access log is off: the portal writes
one line per request itself, with the request id and the user (``kernel.logs.access``).
"""

from __future__ import annotations

import os
from importlib import import_module
from pathlib import Path
from typing import Any

bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")  # noqa: S104 (a container listens on all interfaces)
workers = int(os.environ.get("GUNICORN_WORKERS", "4"))
accesslog = None
logconfig_dict = import_module(os.environ.get("DJANGO_SETTINGS_MODULE", "gpuportal.settings")).LOGGING


def on_starting(server: Any) -> None:
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if folder:
        path = Path(folder)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink()


def child_exit(server: Any, worker: Any) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]

"""Observability settings, read at call time (defaults and the environment: gpuportal/settings.py).

=============================== ===============================================================
GPUPORTAL_METRICS_TOKEN         the bearer token ``GET /metrics`` asks for; unset: loopback only
GPUPORTAL_WORKER_METRICS_PORT   a Celery worker serves its task counters on this port (0: off)
GPUPORTAL_WORKER_METRICS_ADDRESS  ... on this address
=============================== ===============================================================
"""

from __future__ import annotations

from kernel.conf import setting_int, setting_optional_str, setting_str


def metrics_token() -> str | None:
    return setting_optional_str("GPUPORTAL_METRICS_TOKEN") or None


def worker_metrics_port() -> int:
    return setting_int("GPUPORTAL_WORKER_METRICS_PORT")


def worker_metrics_address() -> str:
    return setting_str("GPUPORTAL_WORKER_METRICS_ADDRESS")

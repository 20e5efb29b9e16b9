"""Telemetry settings, each with a default, read from Django settings when present.

=========================================== ======== ==============================================
setting                                     default  meaning
=========================================== ======== ==============================================
GPUPORTAL_TELEMETRY_REPORT_MAX_BYTES        2 MiB    larger report bodies get 413
GPUPORTAL_TELEMETRY_RAW_RETENTION_HOURS     24       raw samples (one per GPU per report)
GPUPORTAL_TELEMETRY_5M_RETENTION_DAYS       30       5-minute means
GPUPORTAL_TELEMETRY_1H_RETENTION_DAYS       365      hourly means
GPUPORTAL_TELEMETRY_STALE_INTERVALS         3        a node is stale after this many intervals ...
GPUPORTAL_TELEMETRY_STALE_MIN_SECONDS       90       ... and never sooner than this
=========================================== ======== ==============================================
"""

from __future__ import annotations

import datetime

from django.conf import settings


def _int(name: str, default: int) -> int:
    value = getattr(settings, name, default)
    return int(value)


def report_max_bytes() -> int:
    return _int("GPUPORTAL_TELEMETRY_REPORT_MAX_BYTES", 2 * 1024 * 1024)


def raw_retention() -> datetime.timedelta:
    return datetime.timedelta(hours=_int("GPUPORTAL_TELEMETRY_RAW_RETENTION_HOURS", 24))


def five_minute_retention() -> datetime.timedelta:
    return datetime.timedelta(days=_int("GPUPORTAL_TELEMETRY_5M_RETENTION_DAYS", 30))


def hourly_retention() -> datetime.timedelta:
    return datetime.timedelta(days=_int("GPUPORTAL_TELEMETRY_1H_RETENTION_DAYS", 365))


def stale_intervals() -> int:
    return _int("GPUPORTAL_TELEMETRY_STALE_INTERVALS", 3)


def stale_min_seconds() -> int:
    return _int("GPUPORTAL_TELEMETRY_STALE_MIN_SECONDS", 90)


def stale_after(interval_seconds: int) -> datetime.timedelta:
    """How long after the last report a node counts as stale: max(3 × interval, 90 s) by default."""
    return datetime.timedelta(seconds=max(stale_intervals() * interval_seconds, stale_min_seconds()))


# Token use is recorded at most this often per token, so a report does not cost a write for it.
TOKEN_LAST_USED_RESOLUTION = datetime.timedelta(seconds=60)

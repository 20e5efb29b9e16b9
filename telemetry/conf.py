"""Telemetry settings, read at call time.

Their defaults and the environment are read in ``gpuportal/settings.py`` (README's configuration
table lists them).

=========================================== ==================================================
setting                                     meaning
=========================================== ==================================================
GPUPORTAL_TELEMETRY_REPORT_MAX_BYTES        larger report bodies get 413
GPUPORTAL_TELEMETRY_RAW_RETENTION_HOURS     raw samples (one per GPU per report)
GPUPORTAL_TELEMETRY_5M_RETENTION_DAYS       5-minute means
GPUPORTAL_TELEMETRY_1H_RETENTION_DAYS       hourly means
GPUPORTAL_TELEMETRY_STALE_INTERVALS         a node is stale after this many intervals ...
GPUPORTAL_TELEMETRY_STALE_MIN_SECONDS       ... and never sooner than this
=========================================== ==================================================
"""

from __future__ import annotations

import datetime

from kernel.conf import setting_int


def report_max_bytes() -> int:
    return setting_int("GPUPORTAL_TELEMETRY_REPORT_MAX_BYTES")


def raw_retention() -> datetime.timedelta:
    return datetime.timedelta(hours=setting_int("GPUPORTAL_TELEMETRY_RAW_RETENTION_HOURS"))


def five_minute_retention() -> datetime.timedelta:
    return datetime.timedelta(days=setting_int("GPUPORTAL_TELEMETRY_5M_RETENTION_DAYS"))


def hourly_retention() -> datetime.timedelta:
    return datetime.timedelta(days=setting_int("GPUPORTAL_TELEMETRY_1H_RETENTION_DAYS"))


def stale_intervals() -> int:
    return setting_int("GPUPORTAL_TELEMETRY_STALE_INTERVALS")


def stale_min_seconds() -> int:
    return setting_int("GPUPORTAL_TELEMETRY_STALE_MIN_SECONDS")


def stale_after(interval_seconds: int) -> datetime.timedelta:
    """How long after the last report a node counts as stale: max(intervals × interval, min seconds)."""
    return datetime.timedelta(seconds=max(stale_intervals() * interval_seconds, stale_min_seconds()))


# Token use is recorded at most this often per token, so a report does not cost a write for it.
TOKEN_LAST_USED_RESOLUTION = datetime.timedelta(seconds=60)

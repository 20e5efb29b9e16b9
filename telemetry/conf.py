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
GPUPORTAL_UTILISATION_MIN_COVERAGE          a bucket holding less of its expected samples is unknown
GPUPORTAL_UTILISATION_RETENTION_DAYS        how long utilisation per allocation is kept
GPUPORTAL_PROMETHEUS_TIMEOUT_SECONDS        one query to a cluster's Prometheus
GPUPORTAL_PROMETHEUS_SCRAPE_SECONDS         the exporters' scrape interval (expected samples)
=========================================== ==================================================
"""

from __future__ import annotations

import datetime

from kernel.conf import setting_float, setting_int


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


def utilisation_min_coverage() -> float:
    """Below this fraction of its expected samples a bucket's activity is unknown (0..1)."""
    return min(1.0, max(0.0, setting_float("GPUPORTAL_UTILISATION_MIN_COVERAGE")))


def utilisation_retention() -> datetime.timedelta:
    return datetime.timedelta(days=setting_int("GPUPORTAL_UTILISATION_RETENTION_DAYS"))


def prometheus_timeout() -> float:
    """Seconds one query to a cluster's Prometheus may take (connecting and reading)."""
    return setting_float("GPUPORTAL_PROMETHEUS_TIMEOUT_SECONDS")


def prometheus_scrape_seconds() -> int:
    return max(1, setting_int("GPUPORTAL_PROMETHEUS_SCRAPE_SECONDS"))


# Token use is recorded at most this often per token, so a report does not cost a write for it.
TOKEN_LAST_USED_RESOLUTION = datetime.timedelta(seconds=60)

"""What the utilisation API shows of one allocation: its buckets over a window and their summary.

One bucket per 5 minutes (1 hour and 24 hours) or per hour (7 days). Where a bucket has both a
measured row (dcgm-exporter or HAMi) and the node agent's, the measured one is shown, as on
``/metrics``. An hour's bucket: coverage is the sum of its 5-minute coverages over the 12 it
holds (missing ones count 0), activity the mean of its known 5-minute activities, memory the
peak. The summary: the mean activity of the known buckets (``None`` when none is known), the mean
coverage of the buckets recorded, GPU-equivalent hours granted and used (used: known buckets only),
and the peak memory used against the memory granted.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from allocations.models import Allocation
from telemetry.models import AllocationUsage, UsageSource
from telemetry.usage.queries import BUCKET_SECONDS

WINDOWS: dict[str, tuple[datetime.timedelta, int]] = {
    "1h": (datetime.timedelta(hours=1), BUCKET_SECONDS),
    "24h": (datetime.timedelta(days=1), BUCKET_SECONDS),
    "7d": (datetime.timedelta(days=7), 3600),
}
_RANK: dict[str, int] = {UsageSource.DCGM: 0, UsageSource.HAMI: 0, UsageSource.AGENT: 1}  # measured first


@dataclass(frozen=True)
class _Row:
    start: datetime.datetime
    source: str
    devices: int
    coverage: float
    activity: float | None
    granted_gpu_eq: float
    used_gpu_eq: float | None
    memory_used_bytes: int | None
    memory_granted_bytes: int | None


def _floor(moment: datetime.datetime, seconds: int) -> datetime.datetime:
    epoch = int(moment.timestamp())
    return datetime.datetime.fromtimestamp(epoch - epoch % seconds, tz=datetime.UTC)


def _best_rows(allocation: Allocation, since: datetime.datetime, until: datetime.datetime) -> list[_Row]:
    rows = AllocationUsage.objects.filter(allocation=allocation, bucket_start__gte=since, bucket_start__lt=until).values_list(
        "bucket_start", "source", "devices", "coverage", "activity", "granted_gpu_eq", "used_gpu_eq",
        "memory_used_bytes", "memory_granted_bytes",
    )  # fmt: skip
    best: dict[datetime.datetime, _Row] = {}
    for values in rows:
        row = _Row(*values)
        kept = best.get(row.start)
        if kept is None or _RANK.get(row.source, 2) < _RANK.get(kept.source, 2):
            best[row.start] = row
    return [best[start] for start in sorted(best)]


def _peak(values: list[int | None]) -> int | None:
    known = [value for value in values if value is not None]
    return max(known) if known else None


def _mean(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return round(sum(known) / len(known), 6) if known else None


def _bucket(start: datetime.datetime, rows: list[_Row], slots: int) -> dict[str, Any]:
    return {
        "start": start,
        "source": min((row.source for row in rows), key=lambda source: _RANK.get(source, 2)),
        "devices": max(row.devices for row in rows),
        "coverage": round(sum(row.coverage for row in rows) / slots, 6),
        "activity": _mean([row.activity for row in rows]),
        "granted_gpu_eq": round(sum(row.granted_gpu_eq for row in rows) / len(rows), 6),
        "used_gpu_eq": _mean([row.used_gpu_eq for row in rows]),
        "memory_used_bytes": _peak([row.memory_used_bytes for row in rows]),
        "memory_granted_bytes": _peak([row.memory_granted_bytes for row in rows]),
    }


def allocation_utilisation(*, allocation: Allocation, window: str, now: datetime.datetime) -> dict[str, Any]:
    """The allocation's buckets over ``window`` (a key of ``WINDOWS``) up to the last bucket that
    ended by ``now``, and their summary. The caller has checked that the allocation is visible."""
    length, seconds = WINDOWS[window]
    until = _floor(now, BUCKET_SECONDS)
    since = until - length
    rows = _best_rows(allocation, since, until)
    grouped: dict[datetime.datetime, list[_Row]] = defaultdict(list)
    for row in rows:
        grouped[_floor(row.start, seconds)].append(row)
    slots = seconds // BUCKET_SECONDS
    buckets = [_bucket(start, grouped[start], slots) for start in sorted(grouped)]
    hours = BUCKET_SECONDS / 3600
    known = [row for row in rows if row.activity is not None]
    peak = _peak([row.memory_used_bytes for row in rows])
    granted_memory = _peak([row.memory_granted_bytes for row in rows])
    summary = {
        "buckets": len(rows),
        "known_buckets": len(known),
        "mean_activity": _mean([row.activity for row in known]),
        "coverage": round(sum(row.coverage for row in rows) / len(rows), 6) if rows else 0.0,
        "granted_gpu_eq_hours": round(sum(row.granted_gpu_eq for row in rows) * hours, 6),
        "used_gpu_eq_hours": round(sum(row.used_gpu_eq or 0.0 for row in known) * hours, 6),
        "memory_used_bytes": peak,
        "memory_granted_bytes": granted_memory,
        "memory_used_ratio": round(peak / granted_memory, 6) if peak is not None and granted_memory else None,
        "sources": sorted({row.source for row in rows}),
    }
    return {
        "allocation": allocation.pk, "window": window, "since": since, "until": until, "bucket_seconds": seconds,
        "buckets": buckets, "summary": summary,
    }  # fmt: skip

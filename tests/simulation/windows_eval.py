"""An evaluator of quota windows of the simulator's own, written from docs/quotas.md ("Quota
windows") and not from ``allocations.quotas.windows``: the ledger's effective limits come from here.

A temporary window is in force on ``[begins_at, ends_at)``; a recurring one on each occurrence of
its RRULE (python-dateutil, counted from ``begins_at`` as a wall time in its zone, none starting at
or after ``ends_at``) for its duration in wall-clock time, a wall time taken at its first pass
(``fold=0``). Field by field, among the approved windows in force that set it: temporary over
recurring, then the asked class's own over a department-wide one, then the newest; an absolute
value replaces the base, a delta is added to it. Never negative; the guarantee never above the
limit.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from zoneinfo import ZoneInfo

from dateutil.rrule import rrulestr

UTC = datetime.UTC
ZERO = Decimal(0)
SPAN_DAYS = 120
"""How far past its start the occurrences of a recurring window are listed (runs are shorter)."""


@dataclass(frozen=True)
class WindowRow:
    id: int
    quota_id: int
    kind: str
    state: str
    begins_at: datetime.datetime
    ends_at: datetime.datetime | None
    rrule: str
    zone: str
    duration_minutes: int | None
    guaranteed_delta: Decimal | None
    limit_delta: Decimal | None
    guaranteed: Decimal | None
    limit: Decimal | None
    priority_class_id: int | None
    shrink_policy: str
    decided_at: datetime.datetime | None


@lru_cache(maxsize=4096)
def _spans(row: WindowRow) -> tuple[tuple[datetime.datetime, datetime.datetime], ...]:
    """The window's spans of force in UTC, in order (occurrences as listed, not merged)."""
    if row.kind == "temporary":
        assert row.ends_at is not None
        return ((row.begins_at, row.ends_at),)
    zone = ZoneInfo(row.zone or "UTC")
    local_start = row.begins_at.astimezone(zone).replace(tzinfo=None)
    rule = rrulestr(row.rrule, dtstart=local_start, ignoretz=True)
    until = local_start + datetime.timedelta(days=SPAN_DAYS)
    duration = datetime.timedelta(minutes=row.duration_minutes or 0)
    spans = []
    for occurrence in rule.between(local_start, until, inc=True):
        begin = occurrence.replace(tzinfo=zone, fold=0).astimezone(UTC)
        end = (occurrence + duration).replace(tzinfo=zone, fold=0).astimezone(UTC)
        if row.ends_at is not None and begin >= row.ends_at:
            break
        if end > begin:
            spans.append((begin, end))
    return tuple(spans)


def in_force(row: WindowRow, at: datetime.datetime) -> bool:
    return any(begin <= at < end for begin, end in _spans(row))


def edges(row: WindowRow, start: datetime.datetime, end: datetime.datetime) -> list[tuple[datetime.datetime, str]]:
    """The instants in ``(start, end]`` where the window starts or stops being in force (touching or
    overlapping occurrences make one span)."""
    merged: list[list[datetime.datetime]] = []
    for begin, finish in _spans(row):
        if merged and begin <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], finish)
        else:
            merged.append([begin, finish])
    found = []
    for begin, finish in merged:
        if start < begin <= end:
            found.append((begin, "begin"))
        if start < finish <= end:
            found.append((finish, "end"))
    return found


def change_points(rows: list[WindowRow], start: datetime.datetime, end: datetime.datetime) -> set[datetime.datetime]:
    """Every instant in ``(start, end)`` where one of ``rows`` begins or ends an occurrence."""
    points: set[datetime.datetime] = set()
    for row in rows:
        for begin, finish in _spans(row):
            if begin >= end:
                break
            for moment in (begin, finish):
                if start < moment < end:
                    points.add(moment)
    return points


def effective(
    *, guaranteed: Decimal, limit: Decimal, rows: list[WindowRow], at: datetime.datetime, priority_class_id: int | None
) -> tuple[Decimal, Decimal, int | None]:
    """(guaranteed, limit, the id of the window that set the limit or None) at ``at`` for the
    department (``priority_class_id`` None) or one class's share."""
    live = [row for row in rows if row.state == "approved" and in_force(row, at)
            and (row.priority_class_id is None or row.priority_class_id == priority_class_id)]

    def winner(name: str) -> WindowRow | None:
        setting = [row for row in live if getattr(row, name) is not None or getattr(row, f"{name}_delta") is not None]
        if not setting:
            return None
        return min(setting, key=lambda row: (row.kind != "temporary", row.priority_class_id is None, -row.id))

    values = {}
    by = None
    for name, base in (("guaranteed", guaranteed), ("limit", limit)):
        chosen = winner(name)
        if chosen is None:
            values[name] = base
            continue
        absolute = getattr(chosen, name)
        values[name] = absolute if absolute is not None else base + (getattr(chosen, f"{name}_delta") or ZERO)
        if name == "limit":
            by = chosen.id
    new_limit = max(values["limit"], ZERO)
    new_guaranteed = min(max(values["guaranteed"], ZERO), new_limit)
    return new_guaranteed, new_limit, by


def class_window_sets_limit(rows: list[WindowRow], at: datetime.datetime, priority_class_id: int) -> bool:
    """Whether an approved window of this class, in force at ``at``, sets the limit of its share."""
    return any(row.state == "approved" and row.priority_class_id == priority_class_id and in_force(row, at)
               and (row.limit is not None or row.limit_delta is not None) for row in rows)

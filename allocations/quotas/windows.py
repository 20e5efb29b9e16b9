"""Effective quotas over time, pure: a quota's base numbers and its windows in, the numbers in
force at an instant (or over an interval, or as a step function) out. No database access.

A window is in force, for a *temporary* one, on ``[begins_at, ends_at)``; for a *recurring* one,
on each ``[start, start + duration)`` where ``start`` is an occurrence of its RRULE counted from
``begins_at`` in its IANA time zone (and before ``ends_at``, when given). Occurrences and
durations are wall-clock times in that zone: "every day 20:00 for 12 hours" is 20:00-08:00 local
time on the 23- and 25-hour days of a DST change too (11 or 13 hours of real time).

Precedence, field by field (``guaranteed`` and ``limit`` separately): among the windows in force
that set the field, a temporary window wins over a recurring one, then a window of the priority
class being asked about over a department-wide one, then the newest (highest id). The winner's
absolute value replaces the base; its delta is added to the base. Windows that do not set a field
leave it to the others. The result is never negative and the guarantee never above the limit.

A priority class's *share* of a department's quota is the department's effective quota, changed by
the windows of that class (a day/night split): asked without a class, only department-wide windows
count.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from zoneinfo import ZoneInfo

from dateutil.rrule import rrule, rrulestr

ZERO = Decimal(0)
UTC = datetime.UTC
LOOKBACK = datetime.timedelta(days=1)


@dataclass(frozen=True)
class WindowSpec:
    """A window as the pure function needs it (one approved ``QuotaWindow`` row)."""

    id: int
    kind: str  # "temporary" or "recurring"
    begins_at: datetime.datetime
    ends_at: datetime.datetime | None = None
    rrule: str = ""
    timezone: str = "UTC"
    duration: datetime.timedelta | None = None
    guaranteed_delta: Decimal | None = None
    limit_delta: Decimal | None = None
    guaranteed: Decimal | None = None
    limit: Decimal | None = None
    priority_class_id: int | None = None

    def sets(self, name: str) -> bool:
        return getattr(self, name) is not None or getattr(self, f"{name}_delta") is not None

    def applied_to(self, name: str, base: Decimal) -> Decimal:
        absolute: Decimal | None = getattr(self, name)
        if absolute is not None:
            return absolute
        delta: Decimal | None = getattr(self, f"{name}_delta")
        return base + (delta or ZERO)


@dataclass(frozen=True)
class Effective:
    guaranteed: Decimal
    limit: Decimal
    guaranteed_by: int | None  # the window whose value holds (None: the base)
    limit_by: int | None
    in_force: tuple[int, ...] = ()  # every window in force that applies, winners or not


@dataclass(frozen=True)
class Step:
    """The effective numbers on ``[start, end)``."""

    start: datetime.datetime
    end: datetime.datetime
    effective: Effective


@dataclass(frozen=True)
class Edge:
    at: datetime.datetime
    window_id: int
    kind: str  # "begin" or "end"


def _aware(moment: datetime.datetime) -> datetime.datetime:
    if moment.tzinfo is None:
        raise ValueError("quota window times must be timezone-aware")
    return moment.astimezone(UTC)


@lru_cache(maxsize=4096)
def _rule(text: str, zone: str, dtstart_local: datetime.datetime) -> rrule:
    parsed = rrulestr(text, dtstart=dtstart_local, forceset=False)
    if not isinstance(parsed, rrule):  # pragma: no cover - forceset=False and one RRULE give an rrule
        raise ValueError("one RRULE expected")
    return parsed


def parse_rrule(text: str, *, zone: str, begins_at: datetime.datetime) -> rrule:
    """The RRULE of a recurring window, its DTSTART the window's start in its zone; raises
    ``ValueError`` (with dateutil's reason) when it cannot be read."""
    tz = ZoneInfo(zone)
    local = _aware(begins_at).astimezone(tz).replace(tzinfo=None)
    body = text.strip()
    if body.upper().startswith("RRULE:"):
        body = body[len("RRULE:"):]
    if not body or "\n" in body or "DTSTART" in body.upper():
        raise ValueError("give one RRULE line without DTSTART (the window's begins_at is its start)")
    return _rule(body, zone, local)


def occurrences(
    spec: WindowSpec, start: datetime.datetime, end: datetime.datetime
) -> list[tuple[datetime.datetime, datetime.datetime]]:
    """The spans (UTC) in which the window is in force that meet ``[start, end)``, in order."""
    start, end = _aware(start), _aware(end)
    if spec.kind == "temporary":
        if spec.ends_at is None:
            return []
        span = (_aware(spec.begins_at), _aware(spec.ends_at))
        return [span] if span[0] < end and span[1] > start and span[0] < span[1] else []
    if not spec.rrule or spec.duration is None or spec.duration <= datetime.timedelta(0):
        return []
    tz = ZoneInfo(spec.timezone or "UTC")
    rule = parse_rrule(spec.rrule, zone=spec.timezone or "UTC", begins_at=spec.begins_at)
    # Occurrences are naive local wall times; an occurrence that starts before ``start`` may still
    # be in force at it, so look back by the duration (and a day for DST slack).
    local_from = (start - spec.duration - LOOKBACK).astimezone(tz).replace(tzinfo=None)
    local_to = end.astimezone(tz).replace(tzinfo=None) + LOOKBACK
    spans = []
    until = _aware(spec.ends_at) if spec.ends_at is not None else None
    for local_start in rule.between(local_from, local_to, inc=True):
        begin = local_start.replace(tzinfo=tz).astimezone(UTC)
        if until is not None and begin >= until:
            break
        finish = (local_start + spec.duration).replace(tzinfo=tz).astimezone(UTC)
        if begin < end and finish > start and begin < finish:
            spans.append((begin, finish))
    return spans


def in_force(spec: WindowSpec, at: datetime.datetime) -> bool:
    moment = _aware(at)
    return any(begin <= moment < finish for begin, finish in occurrences(spec, moment, moment + datetime.timedelta(microseconds=1)))


def _order(spec: WindowSpec, priority_class_id: int | None) -> tuple[int, int, int]:
    narrower = 0 if spec.priority_class_id is not None and spec.priority_class_id == priority_class_id else 1
    return (0 if spec.kind == "temporary" else 1, narrower, -spec.id)


def _applicable(windows: Iterable[WindowSpec], priority_class_id: int | None) -> list[WindowSpec]:
    return [w for w in windows if w.priority_class_id is None or w.priority_class_id == priority_class_id]


def _resolve(
    guaranteed: Decimal, limit: Decimal, active: Sequence[WindowSpec], priority_class_id: int | None
) -> Effective:
    ranked = sorted(active, key=lambda w: _order(w, priority_class_id))
    values = {"guaranteed": guaranteed, "limit": limit}
    winners: dict[str, int | None] = {"guaranteed": None, "limit": None}
    for name in values:
        winner = next((w for w in ranked if w.sets(name)), None)
        if winner is not None:
            values[name] = winner.applied_to(name, values[name])
            winners[name] = winner.id
    most = max(values["limit"], ZERO)
    least = min(max(values["guaranteed"], ZERO), most)
    return Effective(least, most, winners["guaranteed"], winners["limit"], tuple(sorted(w.id for w in ranked)))


def effective(
    *, guaranteed: Decimal, limit: Decimal, windows: Iterable[WindowSpec], at: datetime.datetime,
    priority_class_id: int | None = None,
) -> Effective:
    """The numbers in force at ``at`` (for ``priority_class_id``'s share, when given)."""
    active = [w for w in _applicable(windows, priority_class_id) if in_force(w, at)]
    return _resolve(guaranteed, limit, active, priority_class_id)


def edges(windows: Iterable[WindowSpec], start: datetime.datetime, end: datetime.datetime) -> list[Edge]:
    """Every begin and end of the windows' spans within ``[start, end)``, in time order."""
    start, end = _aware(start), _aware(end)
    out = []
    for spec in windows:
        for begin, finish in occurrences(spec, start, end):
            if start <= begin < end:
                out.append(Edge(begin, spec.id, "begin"))
            if start <= finish < end:
                out.append(Edge(finish, spec.id, "end"))
    return sorted(out, key=lambda edge: (edge.at, edge.kind != "end", edge.window_id))


def timeline(
    *, guaranteed: Decimal, limit: Decimal, windows: Iterable[WindowSpec], start: datetime.datetime,
    end: datetime.datetime, priority_class_id: int | None = None,
) -> list[Step]:
    """The step function of the effective numbers over ``[start, end)``: consecutive steps with
    different numbers or different windows in force."""
    start, end = _aware(start), _aware(end)
    specs = _applicable(windows, priority_class_id)
    spans = {spec.id: occurrences(spec, start, end) for spec in specs}
    cuts = sorted({start, *(moment for found in spans.values() for span in found for moment in span
                            if start < moment < end)})
    steps: list[Step] = []
    for index, cut in enumerate(cuts):
        finish = cuts[index + 1] if index + 1 < len(cuts) else end
        active = [spec for spec in specs if any(b <= cut < f for b, f in spans[spec.id])]
        value = _resolve(guaranteed, limit, active, priority_class_id)
        if steps and steps[-1].effective == value:
            steps[-1] = Step(steps[-1].start, finish, value)
        else:
            steps.append(Step(cut, finish, value))
    return steps


def lowest(
    *, guaranteed: Decimal, limit: Decimal, windows: Iterable[WindowSpec], start: datetime.datetime,
    end: datetime.datetime, priority_class_id: int | None = None,
) -> Effective:
    """The least guarantee and the least limit in force at any moment of ``[start, end)``: what a
    request over that interval must fit (a request that crosses a shrink must fit the shrunk quota)."""
    steps = timeline(guaranteed=guaranteed, limit=limit, windows=windows, start=start, end=end,
                     priority_class_id=priority_class_id)
    least_g = min(steps, key=lambda step: step.effective.guaranteed).effective
    least_l = min(steps, key=lambda step: step.effective.limit).effective
    in_force_ids = tuple(sorted({wid for step in steps for wid in step.effective.in_force}))
    return Effective(least_g.guaranteed, least_l.limit, least_g.guaranteed_by, least_l.limit_by, in_force_ids)


@dataclass
class WindowSet:
    """Windows grouped by the quota they change, for evaluating many quotas at once."""

    by_quota: dict[int, list[WindowSpec]] = field(default_factory=dict)

    def of(self, quota_id: int) -> list[WindowSpec]:
        return self.by_quota.get(quota_id, [])

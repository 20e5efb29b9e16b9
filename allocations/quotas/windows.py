"""Effective quotas over time, pure: a quota's base numbers and its windows in, the numbers in
force at an instant (or over an interval, or as a step function) out. No database access.

A window is in force, for a *temporary* one, on ``[begins_at, ends_at)``; for a *recurring* one,
on each ``[start, start + duration)`` where ``start`` is an occurrence of its RRULE counted from
``begins_at`` in its IANA time zone (and before ``ends_at``, when given: an occurrence that starts
before it runs its whole duration). Occurrences and durations are wall-clock times in that zone:
"every day 20:00 for 12 hours" is 20:00-08:00 local time on the 23- and 25-hour days of a DST
change too (11 or 13 hours of real time). A wall time that a DST change repeats is taken at its
first pass, one that it skips with the offset before the change (PEP 495 ``fold=0``: 02:30 on a
spring-forward night in Berlin is 03:30 summer time); an occurrence that so ends before it starts is
never in force. Occurrences of one window that overlap or touch (a duration as long as the rule's
period) make one span: the window is in force throughout, and its only edges are where the span
begins and ends. An UNTIL in UTC (as RFC 5545 asks of a rule in a time zone) bounds the starts,
inclusive, as the wall time it shows in the zone, like a floating one.

Precedence, field by field (``guaranteed`` and ``limit`` separately): among the windows in force
that set the field, a temporary window wins over a recurring one, then a window of the priority
class being asked about over a department-wide one, then the newest (highest id). The winner's
absolute value replaces the base; its delta is added to the base. Windows that do not set a field
leave it to the others. The result is never negative and the guarantee never above the limit.

A priority class's *share* of a department's quota is the department's effective quota, changed by
the windows of that class (a day/night split): asked without a class, only department-wide windows
count.

Cost: a rule is read once per process (cached), and its occurrences near an instant are searched
from a start moved forward by whole periods of the rule (the same occurrences from there on), so an
evaluation does not grow with the window's age; a rule with COUNT is counted from its own start.
"""

from __future__ import annotations

import calendar
import datetime
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dateutil.rrule import rrule, rrulestr

ZERO = Decimal(0)
UTC = datetime.UTC
LOOKBACK = datetime.timedelta(hours=3)
"""Slack between wall-clock and real time when searching occurrences (more than any DST change)."""
_FIXED_PERIODS = {"DAILY": datetime.timedelta(days=1), "WEEKLY": datetime.timedelta(days=7),
                  "HOURLY": datetime.timedelta(hours=1), "MINUTELY": datetime.timedelta(minutes=1),
                  "SECONDLY": datetime.timedelta(seconds=1)}
_MONTH_PERIODS = {"MONTHLY": 1, "YEARLY": 12}
_RANGES = {"BYMONTH": (1, 12, False), "BYMONTHDAY": (1, 31, True), "BYYEARDAY": (1, 366, True),
           "BYWEEKNO": (1, 53, True)}  # RFC 5545 3.3.10: (least, most, negatives counted from the end too)
_WEEKDAY = re.compile(r"^([+-]?)(\d{1,2})?(MO|TU|WE|TH|FR|SA|SU)$")
_UTC_UNTIL = re.compile(r"^\d{8}T\d{6}Z$")
_LOCAL_UNTIL = re.compile(r"^\d{8}(T\d{6})?$")
MAX_INTERVAL = 100000


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


@dataclass(frozen=True)
class _Compiled:
    """An RRULE checked once: the text dateutil reads (without a UTC UNTIL), that UNTIL, and what
    moving its start forward needs."""

    body: str
    until_utc: datetime.datetime | None
    freq: str
    interval: int
    counted: bool


def _aware(moment: datetime.datetime) -> datetime.datetime:
    if moment.tzinfo is None:
        raise ValueError("quota window times must be timezone-aware")
    return moment.astimezone(UTC)


@lru_cache(maxsize=1024)
def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as error:  # not found, a bad key, a directory
        raise ValueError(f"unknown time zone {name!r}") from error


def _numbers(name: str, value: str) -> list[int]:
    try:
        return [int(item) for item in value.split(",")]
    except ValueError:
        raise ValueError(f"{name} takes whole numbers separated by commas") from None


def _check_parts(parts: dict[str, str]) -> None:
    """What dateutil accepts but RFC 5545 does not, or would make it loop forever or fail later."""
    if "FREQ" not in parts:
        raise ValueError("FREQ is required")
    if "COUNT" in parts and "UNTIL" in parts:
        raise ValueError("COUNT and UNTIL exclude each other (RFC 5545)")
    for name in ("INTERVAL", "COUNT"):
        if name in parts and not (parts[name].isdigit() and 1 <= int(parts[name]) <= MAX_INTERVAL):
            raise ValueError(f"{name} must be a whole number from 1 to {MAX_INTERVAL}")
    for name, (least, most, negative) in _RANGES.items():
        for n in _numbers(name, parts[name]) if name in parts else []:
            if not (least <= n <= most or (negative and -most <= n <= -least)):
                raise ValueError(f"{name} values lie within {'+/-' if negative else ''}{least}..{most}")
    most = {"MONTHLY": 5, "YEARLY": 53}.get(parts["FREQ"], 0)  # an ordinal only in a monthly or yearly rule
    for day in parts["BYDAY"].split(",") if "BYDAY" in parts else []:
        found = _WEEKDAY.match(day)
        if found is None or (found[2] is not None and not 1 <= int(found[2]) <= most):
            raise ValueError(f"BYDAY {day!r}: a weekday (MO..SU)"
                             + (f", optionally after an ordinal within +/-1..{most}" if most else ""))
        if found[1] and found[2] is None:
            raise ValueError(f"BYDAY {day!r}: a sign needs an ordinal")
    days = parts["BYDAY"].split(",") if "BYDAY" in parts else []
    if most and len({day[-2:] == day for day in days}) > 1:  # dateutil would want both at once: no day
        raise ValueError("BYDAY: give plain weekdays (MO,FR) or ordinal ones (1MO,-1FR), not both")
    until = parts.get("UNTIL")
    if until is not None and not (_UTC_UNTIL.match(until) or _LOCAL_UNTIL.match(until)):
        raise ValueError("UNTIL is a date (YYYYMMDD) or a date and time (YYYYMMDDTHHMMSS, Z for UTC)")


@lru_cache(maxsize=4096)
def _compile(text: str) -> _Compiled:
    body = text.strip()
    if body.upper().startswith("RRULE:"):
        body = body[len("RRULE:"):]
    if not body or "\n" in body or "\r" in body or "DTSTART" in body.upper():
        raise ValueError("give one RRULE line without DTSTART (the window's begins_at is its start)")
    parts: dict[str, str] = {}
    for part in body.split(";"):
        name, sign, value = part.partition("=")
        name, value = name.strip().upper(), value.strip().upper()
        if not sign or not name or not value:
            raise ValueError(f"{part!r} is not NAME=VALUE")
        if name in parts:
            raise ValueError(f"{name} is given twice")
        parts[name] = value
    _check_parts(parts)
    until_utc = None
    if _UTC_UNTIL.match(parts.get("UNTIL", "")):
        until_utc = datetime.datetime.strptime(parts.pop("UNTIL"), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    return _Compiled(";".join(f"{name}={value}" for name, value in parts.items()), until_utc, parts["FREQ"],
                     int(parts.get("INTERVAL", "1")), "COUNT" in parts)


@lru_cache(maxsize=16384)
def _rule(body: str, dtstart_local: datetime.datetime, until_local: datetime.datetime | None) -> rrule:
    try:
        parsed = rrulestr(body, dtstart=dtstart_local, forceset=False)
        if not isinstance(parsed, rrule):  # pragma: no cover - forceset=False and one RRULE give an rrule
            raise ValueError("one RRULE expected")
        return parsed.replace(until=until_local) if until_local is not None else parsed
    except (ValueError, TypeError, KeyError, IndexError, OverflowError) as error:
        raise ValueError(f"not a valid RRULE: {error}") from error


def _local(moment: datetime.datetime, tz: ZoneInfo) -> datetime.datetime:
    return moment.astimezone(tz).replace(tzinfo=None)


def _instant(wall: datetime.datetime, tz: ZoneInfo) -> datetime.datetime:
    return wall.replace(tzinfo=tz).astimezone(UTC)  # fold=0: a repeated time's first pass


def parse_rrule(text: str, *, zone: str, begins_at: datetime.datetime) -> rrule:
    """The RRULE of a recurring window, its DTSTART the window's start in its zone (naive local wall
    times, a UTC UNTIL turned into the zone's wall time); raises ``ValueError`` when it cannot be
    read, when it breaks RFC 5545 (COUNT with UNTIL, INTERVAL below 1, BY* values out of range) or
    when the zone is unknown. Cheap: it does not look for an occurrence."""
    tz = _zone(zone)
    compiled = _compile(text)
    until = _local(compiled.until_utc, tz) if compiled.until_utc is not None else None
    return _rule(compiled.body, _local(_aware(begins_at), tz), until)


def _forward(compiled: _Compiled, dtstart: datetime.datetime, before: datetime.datetime) -> datetime.datetime:
    """A start at least one period before ``before``, a whole number of the rule's periods after
    ``dtstart``, with the same time of day, weekday (weekly) and day of month (monthly, yearly):
    dateutil fills what the rule leaves out from its start and lays its periods from it, so the rule
    gives from there on the very occurrences it gives from ``dtstart``. Not with COUNT."""
    if compiled.counted or before <= dtstart:
        return dtstart
    if compiled.freq in _FIXED_PERIODS:
        period = _FIXED_PERIODS[compiled.freq] * compiled.interval
        periods = (before - dtstart) // period - 1
        return dtstart + period * periods if periods > 0 else dtstart
    months = _MONTH_PERIODS[compiled.freq] * compiled.interval
    periods = ((before.year - dtstart.year) * 12 + before.month - dtstart.month) // months - 1
    for back in range(periods, max(periods - 48, 0), -1):  # a day 29-31 that the month lacks: go back
        index = dtstart.month - 1 + back * months
        year, month = dtstart.year + index // 12, index % 12 + 1
        if year <= datetime.MAXYEAR and dtstart.day <= calendar.monthrange(year, month)[1]:
            return dtstart.replace(year=year, month=month)
    return dtstart


def _merged(spans: list[tuple[datetime.datetime, datetime.datetime]]) -> list[tuple[datetime.datetime, datetime.datetime]]:
    out: list[tuple[datetime.datetime, datetime.datetime]] = []
    for begin, finish in sorted(spans):
        if out and begin <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], finish))
        else:
            out.append((begin, finish))
    return out


def occurrences(
    spec: WindowSpec, start: datetime.datetime, end: datetime.datetime
) -> list[tuple[datetime.datetime, datetime.datetime]]:
    """The spans (UTC) in which the window is in force that meet ``[start, end)``, in order, the
    window's overlapping or touching occurrences merged. A span that reaches outside the interval
    is seen as far as the search goes (a day or so beyond it): only its edges inside are exact."""
    start, end = _aware(start), _aware(end)
    if spec.kind == "temporary":
        if spec.ends_at is None:
            return []
        span = (_aware(spec.begins_at), _aware(spec.ends_at))
        return [span] if span[0] < end and span[1] > start and span[0] < span[1] else []
    if not spec.rrule or spec.duration is None or spec.duration <= datetime.timedelta(0):
        return []
    tz = _zone(spec.timezone or "UTC")
    compiled = _compile(spec.rrule)
    until = _local(compiled.until_utc, tz) if compiled.until_utc is not None else None
    dtstart = _local(_aware(spec.begins_at), tz)
    # An occurrence that starts before ``start`` may still be in force at it: look back by the
    # duration (wall-clock and real time differ by a DST change at most: the slack).
    local_from = _local(start - spec.duration - LOOKBACK, tz)
    local_to = _local(end + LOOKBACK, tz)
    rule = _rule(compiled.body, _forward(compiled, dtstart.replace(microsecond=0), local_from), until)
    stop = _aware(spec.ends_at) if spec.ends_at is not None else None
    spans = []
    for local_start in rule.between(local_from, local_to, inc=True):
        begin = _instant(local_start, tz)
        finish = _instant(local_start + spec.duration, tz)
        if (stop is None or begin < stop) and begin < finish:
            spans.append((begin, finish))
    return [(b, f) for b, f in _merged(spans) if b < end and f > start]


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
    at = _aware(at)
    active = [w for w in _applicable(windows, priority_class_id) if in_force(w, at)]
    return _resolve(guaranteed, limit, active, priority_class_id)


def edges(windows: Iterable[WindowSpec], start: datetime.datetime, end: datetime.datetime) -> list[Edge]:
    """Every begin and end of the windows' spans within ``[start, end)``, in time order: exactly
    the instants where the set of windows in force changes (an end at ``start`` included, so that
    consecutive ranges ``[a, b)``, ``[b, c)`` see every edge once)."""
    start, end = _aware(start), _aware(end)
    out = []
    for spec in windows:
        for begin, finish in occurrences(spec, start - datetime.timedelta(microseconds=1), end):
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

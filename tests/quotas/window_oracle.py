"""A brute-force evaluator of quota windows, written apart from ``allocations.quotas.windows`` to
check it: a rule is a plain record (not RRULE text, not dateutil), its occurrences are found by
walking the local calendar day by day from the window's start with zoneinfo, and the precedence is
applied by filtering, as the module's docstring words it.

What it reads of RFC 5545 (the subset the properties draw): FREQ=DAILY, WEEKLY (weeks from Monday)
or MONTHLY with INTERVAL; BYHOUR and BYMINUTE expand a day into times (else the start's hour and
minute); BYDAY keeps the days of those weekdays (WEEKLY without it: the start's weekday), or in a
monthly rule the n-th weekday of the month (1MO, -1FR); BYMONTHDAY keeps days of the month, negative
from its end, so a day a month lacks is skipped (MONTHLY without BYDAY or BYMONTHDAY: the start's
day); both together keep the days that match both. Occurrences before the start do not count; COUNT
keeps the first ones, UNTIL those that start at or before it (a UTC UNTIL read as the wall time it
shows in the zone). A wall time maps to an instant with ``fold=0``.
"""

from __future__ import annotations

import datetime
import itertools
from dataclasses import dataclass
from decimal import Decimal
from zoneinfo import ZoneInfo

UTC = datetime.UTC
DAY = datetime.timedelta(days=1)
WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")


@dataclass(frozen=True)
class Rule:
    freq: str  # DAILY, WEEKLY or MONTHLY
    interval: int = 1
    hours: tuple[int, ...] = ()
    minutes: tuple[int, ...] = ()
    weekdays: tuple[int, ...] = ()  # 0 is Monday
    nth: tuple[tuple[int, int], ...] = ()  # monthly: (n, weekday), n in 1..5 or -5..-1
    monthdays: tuple[int, ...] = ()
    count: int | None = None
    until: datetime.datetime | None = None  # naive: a floating local time; aware: UTC

    def text(self) -> str:
        parts = [f"FREQ={self.freq}"]
        if self.interval != 1:
            parts.append(f"INTERVAL={self.interval}")
        for name, values in (("BYHOUR", self.hours), ("BYMINUTE", self.minutes), ("BYMONTHDAY", self.monthdays)):
            if values:
                parts.append(f"{name}={','.join(str(v) for v in values)}")
        days = [WEEKDAYS[d] for d in self.weekdays] + [f"{n}{WEEKDAYS[d]}" for n, d in self.nth]
        if days:
            parts.append("BYDAY=" + ",".join(days))
        if self.count is not None:
            parts.append(f"COUNT={self.count}")
        if self.until is not None and self.until.tzinfo is not None:
            parts.append("UNTIL=" + self.until.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ"))
        elif self.until is not None:
            parts.append("UNTIL=" + self.until.strftime("%Y%m%dT%H%M%S"))
        return ";".join(parts)


@dataclass(frozen=True)
class Window:
    id: int
    kind: str
    begins_at: datetime.datetime
    ends_at: datetime.datetime | None = None
    rule: Rule | None = None
    zone: str = "UTC"
    minutes: int = 0  # the duration of a recurring window
    guaranteed_delta: Decimal | None = None
    limit_delta: Decimal | None = None
    guaranteed: Decimal | None = None
    limit: Decimal | None = None
    priority_class_id: int | None = None


def _month_index(day: datetime.date) -> int:
    return day.year * 12 + day.month


def _month_length(day: datetime.date) -> int:
    following = (day.replace(day=1) + 32 * DAY).replace(day=1)
    return (following - day.replace(day=1)).days


def _nth_weekday(day: datetime.date, n: int, weekday: int) -> bool:
    if day.weekday() != weekday:
        return False
    from_start, from_end = (day.day - 1) // 7 + 1, (_month_length(day) - day.day) // 7 + 1
    return n == from_start if n > 0 else -n == from_end


def _day_matches(rule: Rule, day: datetime.date, first: datetime.date) -> bool:
    if rule.freq == "DAILY":
        in_period = (day - first).days % rule.interval == 0
    elif rule.freq == "WEEKLY":
        weeks = ((day - DAY * day.weekday()) - (first - DAY * first.weekday())).days // 7
        in_period = weeks % rule.interval == 0
    else:
        in_period = (_month_index(day) - _month_index(first)) % rule.interval == 0
    if not in_period:
        return False
    length = _month_length(day)
    if rule.monthdays and not any(day.day == (d if d > 0 else length + 1 + d) for d in rule.monthdays):
        return False
    if rule.freq == "WEEKLY":
        return day.weekday() in (rule.weekdays or (first.weekday(),))
    if rule.weekdays and day.weekday() not in rule.weekdays:
        return False
    if rule.nth and not any(_nth_weekday(day, n, weekday) for n, weekday in rule.nth):
        return False
    if rule.freq == "MONTHLY" and not (rule.weekdays or rule.nth or rule.monthdays):
        return day.day == first.day
    return True


def local_starts(rule: Rule, zone: str, begins_at: datetime.datetime, upto: datetime.datetime) -> list[datetime.datetime]:
    """The rule's occurrences (naive wall times) from ``begins_at`` to ``upto`` (an instant)."""
    tz = ZoneInfo(zone)
    start = begins_at.astimezone(tz).replace(tzinfo=None)
    last = upto.astimezone(tz).replace(tzinfo=None)
    until = rule.until
    if until is not None and until.tzinfo is not None:
        until = until.astimezone(tz).replace(tzinfo=None)
    times = sorted(datetime.time(h, m, start.second)
                   for h, m in itertools.product(rule.hours or (start.hour,), rule.minutes or (start.minute,)))
    found: list[datetime.datetime] = []
    day = start.date()
    while day <= last.date():
        if _day_matches(rule, day, start.date()):
            for moment in (datetime.datetime.combine(day, t) for t in times):
                if moment < start:
                    continue
                if (until is not None and moment > until) or (rule.count is not None and len(found) >= rule.count):
                    return found
                found.append(moment)
        day += DAY
    return found


def spans(window: Window, upto: datetime.datetime) -> list[tuple[datetime.datetime, datetime.datetime]]:
    """Each occurrence's ``[begin, end)`` (UTC), not merged, for occurrences that start by ``upto``."""
    if window.kind == "temporary":
        return [(window.begins_at, window.ends_at)] if window.ends_at is not None else []
    assert window.rule is not None
    tz = ZoneInfo(window.zone)
    out = []
    for wall in local_starts(window.rule, window.zone, window.begins_at, upto):
        begin = wall.replace(tzinfo=tz).astimezone(UTC)
        finish = (wall + datetime.timedelta(minutes=window.minutes)).replace(tzinfo=tz).astimezone(UTC)
        if begin < finish and (window.ends_at is None or begin < window.ends_at):
            out.append((begin, finish))
    return out


class Oracle:
    """The windows of one quota, their occurrences found once up to ``upto``."""

    def __init__(self, windows: list[Window], upto: datetime.datetime) -> None:
        self.windows = windows
        self.spans = {w.id: spans(w, upto) for w in windows}

    def in_force(self, at: datetime.datetime) -> set[int]:
        return {wid for wid, found in self.spans.items() if any(b <= at < f for b, f in found)}

    def effective(self, guaranteed: Decimal, limit: Decimal, at: datetime.datetime,
                  priority_class_id: int | None) -> tuple[Decimal, Decimal, int | None, int | None, tuple[int, ...]]:
        ids = self.in_force(at)
        active = [w for w in self.windows if w.id in ids and w.priority_class_id in (None, priority_class_id)]
        values = {"guaranteed": guaranteed, "limit": limit}
        by: dict[str, int | None] = {"guaranteed": None, "limit": None}
        for name in values:
            setters = [w for w in active if getattr(w, name) is not None or getattr(w, f"{name}_delta") is not None]
            if any(w.kind == "temporary" for w in setters):
                setters = [w for w in setters if w.kind == "temporary"]
            if priority_class_id is not None and any(w.priority_class_id == priority_class_id for w in setters):
                setters = [w for w in setters if w.priority_class_id == priority_class_id]
            if setters:
                winner = max(setters, key=lambda w: w.id)
                absolute, delta = getattr(winner, name), getattr(winner, f"{name}_delta")
                values[name] = absolute if absolute is not None else values[name] + delta
                by[name] = winner.id
        top = values["limit"] if values["limit"] > 0 else Decimal(0)
        least = min(values["guaranteed"] if values["guaranteed"] > 0 else Decimal(0), top)
        return least, top, by["guaranteed"], by["limit"], tuple(sorted(w.id for w in active))

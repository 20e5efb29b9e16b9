"""Walking a rule's occurrence starts against a budget, and rules too dense to walk start by start,
pure (``allocations.quotas.windows`` uses both). A walk counts the starts it takes up and, at an
eighth of the cost, those it passes over; it raises ``_Spent`` when either runs out. A rule with
more than :data:`DENSE` times a day (only one stored before the bounds of
``allocations.quotas.rrule_bounds``) is walked day by day instead: its times of day merged once
into the spans they cover, so every second of a day costs what one occurrence does."""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from zoneinfo import ZoneInfo

from dateutil.rrule import rrule

from allocations.quotas.rrules import _Compiled, _forward, _instant, _rule
from kernel.times import COMPACT_DAY, COMPACT_SECOND

PASSED_PER_TAKEN = 8
"""Starts passed over (before the interval, or searched back for the latest) cost an eighth of
one taken up (no time zone arithmetic): the budget allows that many more of them."""


class _Spent(Exception):
    """The budget ran out; ``last`` is the last start walked (local wall time)."""

    def __init__(self, last: datetime.datetime) -> None:
        super().__init__("budget spent")
        self.last = last


@dataclass
class _Walk:
    """Starts walked so far against the budget: those taken up, and those passed over."""

    budget: int
    taken: int = 0
    passed: int = 0

    def starts(
        self, rule: rrule, low: datetime.datetime, high: datetime.datetime, *, passing: bool = False
    ) -> Iterator[datetime.datetime]:
        """The rule's starts in ``[low, high]`` in order, counting every start walked (those before
        ``low`` as passed over, all of them when ``passing``); raises ``_Spent`` when the budget is out."""
        for wall in rule:
            if wall > high:
                return
            if passing or wall < low:
                self.passed += 1
            else:
                self.taken += 1
            if self.taken > self.budget or self.passed > self.budget * PASSED_PER_TAKEN:
                raise _Spent(wall)
            if wall >= low:
                yield wall


DENSE = 96
"""A rule with more times a day than this (BYHOUR × BYMINUTE × BYSECOND, more often than every 15
minutes: only one stored before the bounds) is walked day by day, each day's occurrences merged."""
_TIME_PARTS = ("BYHOUR", "BYMINUTE", "BYSECOND")
_DAY = 86400


@lru_cache(maxsize=256)
def _dense_day(body: str, hour: int, minute: int, second: int) -> tuple[str, tuple[int, ...]] | None:
    """For a dense rule without COUNT or BYSETPOS: the rule of its days (at midnight) and its times
    of day in seconds, sorted; else None (``hour``, ``minute``, ``second``: its start's, the defaults)."""
    parts = dict(part.split("=", 1) for part in body.split(";"))
    if "COUNT" in parts or "BYSETPOS" in parts or parts["FREQ"] not in ("DAILY", "WEEKLY", "MONTHLY", "YEARLY"):
        return None
    values = [sorted({int(v) for v in parts[name].split(",")}) if name in parts else [default]
              for name, default in zip(_TIME_PARTS, (hour, minute, second), strict=True)]
    if len(values[0]) * len(values[1]) * len(values[2]) <= DENSE:
        return None
    times = tuple(sorted(h * 3600 + m * 60 + sec for h in values[0] for m in values[1] for sec in values[2]))
    days = ";".join([*(f"{k}={v}" for k, v in parts.items() if k not in _TIME_PARTS), "BYHOUR=0;BYMINUTE=0;BYSECOND=0"])
    return days, times


def _local_until(body: str) -> datetime.datetime | None:
    """A floating UNTIL left in the rule's text, as the wall time dateutil reads it."""
    for part in body.split(";"):
        if part.startswith("UNTIL="):
            value = part[len("UNTIL="):]
            wall = COMPACT_SECOND if "T" in value else COMPACT_DAY
            return datetime.datetime.strptime(value, wall)  # noqa: DTZ007 - a floating wall time, as dateutil reads it
    return None


def _day_spans(times: Sequence[int], length: int) -> list[tuple[int, int]]:
    """Occurrences at ``times`` (seconds into a day), each ``length`` seconds long, merged."""
    out: list[tuple[int, int]] = []
    for moment in times:
        if out and moment <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], moment + length))
        else:
            out.append((moment, moment + length))
    return out


@lru_cache(maxsize=256)
def _whole_day(body: str, hour: int, minute: int, second: int, length: int) -> tuple[tuple[int, int], ...]:
    """A whole day's merged occurrences of a dense rule (keyed by the rule, not its many times)."""
    dense = _dense_day(body, hour, minute, second)
    return tuple(_day_spans(dense[1], length)) if dense is not None else ()


@dataclass(frozen=True)
class _LocalRule:
    """A recurring window in its zone's wall time: the compiled rule, its first start, its UNTIL
    and its ``ends_at`` (``stop``) as wall times, the zone and each occurrence's duration."""

    compiled: _Compiled
    dtstart: datetime.datetime
    until: datetime.datetime | None
    stop: datetime.datetime | None
    tz: ZoneInfo
    duration: datetime.timedelta


def _dense_expand(
    dense: tuple[str, tuple[int, ...]], local: _LocalRule, *, low: datetime.datetime, high: datetime.datetime,
    walk: _Walk,
) -> list[tuple[datetime.datetime, datetime.datetime]]:
    """The spans (UTC, not merged across days) of a dense rule's occurrences that start from the day
    before ``low`` to ``high`` (local wall times), walking its days: each day's occurrences merged
    once (a day where the rule starts or stops, at its start, UNTIL or ``ends_at``, cut to the
    starts it keeps)."""
    compiled, dtstart, stop, tz = local.compiled, local.dtstart, local.stop, local.tz
    days_body, times = dense
    until = local.until if local.until is not None else _local_until(days_body)
    length = int(local.duration.total_seconds())
    low = low - datetime.timedelta(days=1)
    midnight = dtstart.replace(hour=0, minute=0, second=0)
    whole = _whole_day(compiled.body, dtstart.hour, dtstart.minute, dtstart.second, length)
    rule = _rule(days_body, _forward(compiled, midnight, low), None)
    spans = []
    for day in walk.starts(rule, low.replace(hour=0, minute=0, second=0), high):
        if (until is not None and day > until) or (stop is not None and day >= stop):
            break
        first = (dtstart - day).total_seconds() if day <= dtstart else -1
        cuts = [] if until is None else [(until - day).total_seconds() + 0.5]  # UNTIL keeps a start at it
        cuts += [] if stop is None else [(stop - day).total_seconds()]  # ends_at does not
        last = min(cuts, default=_DAY * 2)
        if first < 0 and last >= _DAY:
            found: Sequence[tuple[int, int]] = whole
        else:
            found = _day_spans([t for t in times if first <= t < last], length)
        for a, b in found:
            begin = _instant(day + datetime.timedelta(seconds=a), tz)
            finish = _instant(day + datetime.timedelta(seconds=b), tz)
            if begin < finish:
                spans.append((begin, finish))
    return spans

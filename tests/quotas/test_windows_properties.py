"""Hypothesis properties of the effective-quota function (``allocations.quotas.windows``), held
against the brute-force evaluator of ``tests/quotas/window_oracle.py`` (the local calendar walked
day by day with zoneinfo, the precedence applied by filtering).

Random sets of one to four windows change a random base: temporary ones, and recurring ones by
FREQ=DAILY, WEEKLY or MONTHLY rules (INTERVAL, BYHOUR, BYMINUTE, BYDAY plain or n-th, BYMONTHDAY
positive or from the month's end, COUNT, UNTIL floating or in UTC) in Europe/Berlin,
America/New_York, Asia/Shanghai, Australia/Lord_Howe (a 30-minute DST change) or UTC, lasting a
minute to two days (so across midnight, and longer than their period: occurrences that overlap),
started up to 14 months before, some cut by ``ends_at``; deltas and absolute values, department-wide
or for one of two priority classes. The instants lie around DST changes (the 23- and 25-hour days of
Berlin and New York, Lord Howe's half hours) and month ends.

* ``effective()`` at random instants, and at every begin and end of an occurrence and just before
  it, is the brute-force evaluation (numbers, the windows that set them, the windows in force);
* ``timeline()`` covers its range with contiguous steps, consecutive steps differ, and every minute
  inside a step evaluates (``effective()``) to that step; ``lowest()`` is the least guarantee and the
  least limit over those minutes;
* ``edges()`` are exactly the minutes where the set of windows in force changes, each with the
  window and whether it began or ended there (boundaries fall on whole minutes);
* ``occurrences()`` of any rule dateutil reads (YEARLY to MINUTELY, BYMONTH, BYSETPOS...) are those
  dateutil gives when counted from the window's own start: moving the start forward by whole periods
  (what keeps an old window's evaluation cheap) changes nothing.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass, replace
from decimal import Decimal
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from dateutil.rrule import rrulestr
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from allocations.quotas.windows import (
    Effective,
    WindowSpec,
    edges,
    effective,
    in_force,
    lowest,
    occurrences,
    parse_rrule,
    timeline,
)

from .window_oracle import Oracle, Rule, Window

UTC = datetime.UTC
MINUTE = datetime.timedelta(minutes=1)
ZONES = ("Europe/Berlin", "America/New_York", "Asia/Shanghai", "Australia/Lord_Howe", "UTC")
ANCHORS = tuple((datetime.datetime(*moment, tzinfo=UTC), zone) for moment, zone in (
    ((2026, 3, 28, 12), "Europe/Berlin"), ((2026, 10, 24, 12), "Europe/Berlin"),  # the 23- and 25-hour days
    ((2026, 3, 7, 12), "America/New_York"), ((2026, 10, 31, 12), "America/New_York"),  # 8 March, 1 November
    ((2026, 4, 4, 0), "Australia/Lord_Howe"), ((2026, 10, 3, 0), "Australia/Lord_Howe"),  # half an hour
    ((2026, 1, 30, 0), "Asia/Shanghai"), ((2026, 2, 27, 0), "UTC"), ((2028, 2, 27, 0), "Europe/Berlin"),
    ((2026, 6, 29, 0), "America/New_York"),  # month ends, a leap day
))
DURATIONS = (1, 30, 90, 11 * 60 + 30, 12 * 60, 13 * 60, 24 * 60, 25 * 60, 36 * 60)
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SWEEP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def minutes(count: int) -> datetime.timedelta:
    return datetime.timedelta(minutes=count)


def tuple_of(values: st.SearchStrategy[int], most: int) -> st.SearchStrategy[tuple[int, ...]]:
    return st.sets(values, max_size=most).map(lambda found: tuple(sorted(found)))


@st.composite
def rules(draw: st.DrawFn, anchor: datetime.datetime, zone: str) -> Rule:
    """A rule likely to occur around ``anchor``: days of the month and n-th weekdays near it too."""
    freq = draw(st.sampled_from(["DAILY", "WEEKLY", "MONTHLY"]))
    rule = Rule(freq, interval=draw(st.sampled_from([1, 1, 1, 2, 3])),
                hours=draw(tuple_of(st.sampled_from([0, 1, 2, 3, 8, 12, 20, 23]), 2)),
                minutes=draw(tuple_of(st.sampled_from([0, 15, 30, 59]), 2)))
    near = [anchor.astimezone(ZoneInfo(zone)).date() + datetime.timedelta(days=d) for d in (0, 1)]
    monthdays = tuple_of(st.sampled_from([1, 29, 30, 31, -1, -2, *(day.day for day in near)]), 2)
    nth = st.sampled_from([(1, 0), (5, 4), (-1, 4), *(((day.day - 1) // 7 + 1, day.weekday()) for day in near),
                           *((-((31 - day.day) // 7 + 1), day.weekday()) for day in near)])
    days = draw(st.sampled_from(["start", "start", "weekdays", "monthdays"] + ["nth", "both"] * (freq == "MONTHLY")))
    if freq == "WEEKLY" or days in ("weekdays", "both"):
        rule = replace(rule, weekdays=draw(tuple_of(st.integers(0, 6), 3)))
    if freq != "WEEKLY" and days in ("monthdays", "both"):
        rule = replace(rule, monthdays=draw(monthdays))
    if days == "nth":
        rule = replace(rule, nth=tuple(sorted(draw(st.sets(nth, min_size=1, max_size=2)))))
    end = draw(st.sampled_from(["none", "none", "none", "none", "count", "floating", "utc"]))
    until = anchor + minutes(draw(st.integers(-2 * 1440, 6 * 1440)))
    if end == "count":
        return replace(rule, count=draw(st.integers(1, 15)))
    if end == "floating":
        return replace(rule, until=until.astimezone(ZoneInfo(zone)).replace(tzinfo=None))
    return replace(rule, until=until) if end == "utc" else rule


def amounts(low: int, high: int) -> st.SearchStrategy[Decimal | None]:
    return st.none() | st.integers(low, high).map(lambda n: Decimal(n) / 2)


@st.composite
def windows(draw: st.DrawFn, anchor: datetime.datetime, home: str) -> Window:
    values: dict[str, Any] = {}  # one of the absolute value and the delta, field by field
    for name in ("guaranteed", "limit"):
        if draw(st.booleans()):
            values[name] = draw(amounts(0, 24))
        else:
            values[f"{name}_delta"] = draw(amounts(-12, 12))
    priority_class_id = draw(st.sampled_from([None, None, 1, 2]))
    if draw(st.integers(0, 2)) == 0:
        begins = anchor + minutes(draw(st.integers(-3 * 1440, 3 * 1440)))
        temporary = Window(0, "temporary", begins, begins + minutes(draw(st.integers(1, 3 * 1440))),
                           priority_class_id=priority_class_id)
        return replace(temporary, **values)
    zone = draw(st.sampled_from([home, home, *ZONES]))
    rule = draw(rules(anchor, zone))
    days = st.sampled_from([0, 1, 2, 7] if rule.count else [0, 1, 2, 7, 35, 100, 400])
    back = draw(days) * 1440 + draw(st.integers(0, 1439))
    cut = draw(st.sampled_from([False, False, False, True]))
    ends = anchor + minutes(draw(st.integers(0, 3 * 1440))) if cut else None
    length = draw(st.sampled_from(DURATIONS) | st.integers(1, 3000))
    recurring = Window(0, "recurring", anchor - minutes(back), ends, rule, zone, length,
                       priority_class_id=priority_class_id)
    return replace(recurring, **values)


@dataclass(frozen=True)
class Scenario:
    windows: list[Window]
    guaranteed: Decimal
    limit: Decimal
    priority_class_id: int | None
    start: datetime.datetime
    end: datetime.datetime

    @property
    def specs(self) -> list[WindowSpec]:
        return [spec(w) for w in self.windows]

    def minutes(self) -> list[datetime.datetime]:
        count = -(-(self.end - self.start) // MINUTE)
        return [self.start + minutes(k) for k in range(count)]


def spec(window: Window) -> WindowSpec:
    recurring = window.rule is not None
    return WindowSpec(
        id=window.id, kind=window.kind, begins_at=window.begins_at, ends_at=window.ends_at,
        rrule=window.rule.text() if window.rule is not None else "", timezone=window.zone,
        duration=minutes(window.minutes) if recurring else None, guaranteed_delta=window.guaranteed_delta,
        limit_delta=window.limit_delta, guaranteed=window.guaranteed, limit=window.limit,
        priority_class_id=window.priority_class_id,
    )


@st.composite
def scenarios(draw: st.DrawFn, most_windows: int = 4, most_minutes: int = 48 * 60) -> Scenario:
    anchor, home = draw(st.sampled_from(ANCHORS))
    found = draw(st.lists(windows(anchor, home), min_size=1, max_size=most_windows))
    ids = draw(st.permutations(range(1, len(found) + 1)))
    start = anchor + minutes(draw(st.integers(-12 * 60, 36 * 60)))
    length = min(draw(st.sampled_from([1, 90, 720, 1440, 2880])) + draw(st.integers(0, 59)), most_minutes)
    return Scenario(
        [replace(w, id=i) for w, i in zip(found, ids, strict=True)],
        Decimal(draw(st.integers(0, 10))), Decimal(draw(st.integers(0, 12))),
        draw(st.sampled_from([None, 1, 2])), start, start + minutes(length),
    )


def as_tuple(value: Effective) -> tuple[Decimal, Decimal, int | None, int | None, tuple[int, ...]]:
    return value.guaranteed, value.limit, value.guaranteed_by, value.limit_by, value.in_force


_UTC = datetime.UTC
_WINDOW_ENDED_BEFORE_ITS_LATEST_START = Scenario(  # the latest start before the instant lies after the window's end
    windows=[Window(3, "recurring", datetime.datetime(2026, 3, 28, 11, 59, tzinfo=_UTC),
                    datetime.datetime(2026, 3, 28, 12, 0, tzinfo=_UTC), Rule("DAILY", hours=(0, 12)),
                    "Europe/Berlin", 1440)],
    guaranteed=Decimal(0), limit=Decimal(0), priority_class_id=None,
    start=datetime.datetime(2026, 3, 28, 12, 0, tzinfo=_UTC), end=datetime.datetime(2026, 3, 29, 12, 0, tzinfo=_UTC),
)


@SETTINGS
@given(scenarios(), st.lists(st.integers(0, 48 * 3600 - 1), min_size=8, max_size=8))
@example(_WINDOW_ENDED_BEFORE_ITS_LATEST_START, [0] * 8)
def test_effective_at_any_instant_is_the_brute_force_evaluation(scenario: Scenario, seconds: list[int]) -> None:
    oracle = Oracle(scenario.windows, scenario.end + datetime.timedelta(days=3))
    span = (scenario.end - scenario.start).total_seconds()
    instants = [scenario.start + datetime.timedelta(seconds=s % span) for s in seconds]
    for found in oracle.spans.values():  # every edge and the microsecond before it
        instants += [moment + delta for b, f in found for moment in (b, f)
                     for delta in (datetime.timedelta(0), -datetime.timedelta(microseconds=1))
                     if scenario.start <= moment < scenario.end]
    specs = scenario.specs
    for at in instants:
        got = effective(guaranteed=scenario.guaranteed, limit=scenario.limit, windows=specs, at=at,
                        priority_class_id=scenario.priority_class_id)
        assert as_tuple(got) == oracle.effective(scenario.guaranteed, scenario.limit, at, scenario.priority_class_id), at


@SWEEP
@given(scenarios(most_windows=3, most_minutes=14 * 60))
def test_timeline_holds_minute_by_minute_and_lowest_is_its_least(scenario: Scenario) -> None:
    common: dict[str, Any] = {"guaranteed": scenario.guaranteed, "limit": scenario.limit, "windows": scenario.specs,
              "priority_class_id": scenario.priority_class_id}
    steps = timeline(span=(scenario.start, scenario.end), **common)
    assert steps[0].start == scenario.start and steps[-1].end == scenario.end
    assert all(a.end == b.start and a.start < a.end for a, b in pairwise(steps))
    assert all(a.effective != b.effective for a, b in pairwise(steps))
    seen, index = [], 0
    for at in scenario.minutes():
        while steps[index].end <= at:
            index += 1
        value = effective(at=at, **common)
        assert value == steps[index].effective, at
        seen.append(value)
    least = lowest(start=scenario.start, end=scenario.end, **common)
    assert least.guaranteed == min(v.guaranteed for v in seen) and least.limit == min(v.limit for v in seen)
    assert least.in_force == tuple(sorted({wid for v in seen for wid in v.in_force}))


@SETTINGS
@given(scenarios())
def test_edges_are_exactly_the_minutes_where_the_windows_in_force_change(scenario: Scenario) -> None:
    oracle = Oracle(scenario.windows, scenario.end + datetime.timedelta(days=3))
    expected, before = set(), oracle.in_force(scenario.start - MINUTE)
    for at in scenario.minutes():
        now = oracle.in_force(at)
        expected |= {(at, wid, "begin") for wid in now - before} | {(at, wid, "end") for wid in before - now}
        before = now
    found = edges(scenario.specs, scenario.start, scenario.end)
    assert {(e.at, e.window_id, e.kind) for e in found} == expected
    assert len(found) == len(expected) and [e.at for e in found] == sorted(e.at for e in found)
    by_id = {s.id: s for s in scenario.specs}
    assert all(in_force(by_id[e.window_id], e.at) == (e.kind == "begin") for e in found)


FREQS = ("YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY")


@st.composite
def any_rules(draw: st.DrawFn) -> tuple[str, int]:
    """RRULE text over more of RFC 5545 than the oracle reads, and how far back it may start (minutes)."""
    freq = draw(st.sampled_from(FREQS))
    parts = [f"FREQ={freq}", f"INTERVAL={draw(st.integers(1, 5))}"]
    options: dict[str, st.SearchStrategy[Any]] = {
        "BYMONTH": tuple_of(st.integers(1, 12), 3), "BYMONTHDAY": tuple_of(st.sampled_from([1, 2, 15, 29, 31, -1]), 2),
        "BYDAY": st.sets(st.sampled_from(["MO", "WE", "SA", "SU"]), min_size=1, max_size=2),
        "BYHOUR": tuple_of(st.sampled_from([0, 2, 9, 20]), 2), "BYMINUTE": tuple_of(st.sampled_from([0, 30]), 2),
        "BYSETPOS": st.sampled_from([(1,), (-1,), (1, 2)]),
    }
    for name, values in options.items():
        chosen: Iterable[Any] = draw(values) if draw(st.booleans()) else ()
        if chosen:
            parts.append(f"{name}={','.join(str(v) for v in sorted(chosen))}")
    back = {"HOURLY": 3 * 1440, "MINUTELY": 300}.get(freq, 3 * 366 * 1440)
    return ";".join(parts), back


def merged(spans: list[tuple[datetime.datetime, datetime.datetime]]) -> list[tuple[datetime.datetime, datetime.datetime]]:
    out: list[tuple[datetime.datetime, datetime.datetime]] = []
    for begin, finish in sorted(spans):
        if out and begin <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], finish))
        else:
            out.append((begin, finish))
    return out


@SETTINGS
@given(any_rules(), st.sampled_from(ZONES), st.sampled_from([a for a, _ in ANCHORS]), st.integers(0, 10**9),
       st.integers(1, 36 * 60), st.integers(1, 3 * 1440))
def test_occurrences_from_a_start_moved_forward_are_those_from_the_windows_own_start(
    rule: tuple[str, int], zone: str, anchor: datetime.datetime, back: int, duration: int, length: int,
) -> None:
    text, furthest = rule
    window = WindowSpec(id=1, kind="recurring", begins_at=anchor - minutes(back % furthest), rrule=text,
                        timezone=zone, duration=minutes(duration))
    start, end = anchor, anchor + minutes(length)
    tz = ZoneInfo(zone)
    try:
        plain = rrulestr(text, dtstart=window.begins_at.astimezone(tz).replace(tzinfo=None))
    except ValueError:  # a set no start reaches (BYMINUTE=0 every 2 minutes from an odd one): refused by both
        with pytest.raises(ValueError, match="not a valid RRULE"):
            parse_rrule(text, zone=zone, begins_at=window.begins_at)
        return
    local_from = (start - minutes(duration) - datetime.timedelta(days=1)).astimezone(tz).replace(tzinfo=None)
    local_to = (end + datetime.timedelta(days=1)).astimezone(tz).replace(tzinfo=None)
    spans = []
    for wall in plain.between(local_from, local_to, inc=True):
        begin, finish = (moment.replace(tzinfo=tz).astimezone(UTC) for moment in (wall, wall + minutes(duration)))
        if begin < finish:
            spans.append((begin, finish))
    expected = [(b, f) for b, f in merged(spans) if b < end and f > start]
    found = occurrences(window, start, end)
    inside = [(max(b, start), min(f, end)) for b, f in found]
    assert inside == [(max(b, start), min(f, end)) for b, f in expected]

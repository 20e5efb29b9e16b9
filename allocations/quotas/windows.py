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
evaluation does not grow with the window's age; a rule with COUNT is counted from its own start. An
occurrence that starts long before the interval (a long duration) is found as the latest start
before it, not by walking every start since, so an evaluation grows with the interval asked about,
not with the duration.

Budget: an evaluation takes up at most ``budget`` occurrence starts (:data:`BUDGET` unless the caller
asks for less: lists and calendars ask for :data:`PAGE_BUDGET`). The services refuse a rule that
could come near it (``allocations.windows.services``: at most hourly, a bounded number of edges a
year); a rule stored before those bounds that runs the budget out is taken as in force without a
break from the last start taken up to the end of the interval (what a rule that dense amounts to: its
occurrences, a minute or more long, overlap), so that no rule makes an evaluation slow. A rule with
more than 96 times a day is walked day by day, each day's occurrences merged once
(``allocations.quotas.walking``): the reported every-second rule costs a start a day.
"""

from __future__ import annotations

import datetime
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from allocations.quotas.rrules import MAX_INTERVAL as MAX_INTERVAL  # read from here too
from allocations.quotas.rrules import (
    _aware,
    _compile,
    _Compiled,
    _instant,
    _local,
    _rule,
    _zone,
)
from allocations.quotas.rrules import _forward as _forward  # here, where the bench swaps it
from allocations.quotas.rrules import parse_rrule as parse_rrule  # read from here too
from allocations.quotas.walking import _dense_day, _dense_expand, _LocalRule, _Spent, _Walk

ZERO = Decimal(0)
UTC = datetime.UTC
LOOKBACK = datetime.timedelta(hours=3)
"""Slack between wall-clock and real time when searching occurrences (more than any DST change)."""
BUDGET = 10_000
"""Occurrence starts one evaluation takes up at most (some tens of milliseconds); an accepted rule
needs far fewer (by default at most 24 a day: a 92-day timeline takes up at most about 2,200)."""
PAGE_BUDGET = 500
"""What one window's evaluation in a list or a calendar takes up at most: a page's worth."""
_HEAD_SEARCH = (datetime.timedelta(days=1), datetime.timedelta(days=32), datetime.timedelta(days=366))


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


def _merged(spans: list[tuple[datetime.datetime, datetime.datetime]]) -> list[tuple[datetime.datetime, datetime.datetime]]:
    out: list[tuple[datetime.datetime, datetime.datetime]] = []
    for begin, finish in sorted(spans):
        if out and begin <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], finish))
        else:
            out.append((begin, finish))
    return out


def _latest_before(
    compiled: _Compiled, dtstart: datetime.datetime, until: datetime.datetime | None, floor: datetime.datetime,
    cut: datetime.datetime, walk: _Walk,
) -> datetime.datetime | None:
    """The latest start in ``[floor, cut)`` (local wall times), searched back over growing spans
    (a day, a month, a year, all) from a start moved forward, so that a long duration does not walk
    every start since ``floor``."""
    for back in (*_HEAD_SEARCH, None):
        low = floor if back is None or cut - back <= floor else cut - back
        rule = _rule(compiled.body, _forward(compiled, dtstart, low), until)
        found = None
        for wall in walk.starts(rule, floor, cut, passing=True):
            if wall < cut:
                found = wall
        if found is not None or low == floor:
            return found
    return None  # pragma: no cover - the last span is ``floor``


def _expand(
    spec: WindowSpec, start: datetime.datetime, end: datetime.datetime, walk: _Walk
) -> tuple[list[tuple[datetime.datetime, datetime.datetime]], datetime.datetime | None]:
    """``occurrences`` and, when the walk's budget ran out, the instant from which its answer is
    the budget's (in force throughout), else None."""
    start, end = _aware(start), _aware(end)
    if spec.kind == "temporary":
        if spec.ends_at is None:
            return [], None
        span = (_aware(spec.begins_at), _aware(spec.ends_at))
        return ([span] if span[0] < end and span[1] > start and span[0] < span[1] else []), None
    if not spec.rrule or spec.duration is None or spec.duration <= datetime.timedelta(0):
        return [], None
    tz = _zone(spec.timezone or "UTC")
    compiled = _compile(spec.rrule)
    until = _local(compiled.until_utc, tz) if compiled.until_utc is not None else None
    dtstart = _local(_aware(spec.begins_at), tz).replace(microsecond=0)
    # An occurrence that starts before ``start`` may still be in force at it: look back by the
    # duration (wall-clock and real time differ by a DST change at most: the slack). Of those that
    # start more than the slack before ``start``, the latest ends last (up to that slack): only the
    # starts from the slack before it on are walked.
    floor = _local(start - spec.duration - LOOKBACK, tz)
    stop = _aware(spec.ends_at) if spec.ends_at is not None else None
    # no occurrence starts at or after the window's end: the latest start is sought before it
    cut = min(_local(start - LOOKBACK, tz), _local(stop, tz)) if stop is not None else _local(start - LOOKBACK, tz)
    local_to = _local(end + LOOKBACK, tz)
    spans = []
    spent: datetime.datetime | None = None
    dense = _dense_day(compiled.body, dtstart.hour, dtstart.minute, dtstart.second)
    try:
        if dense is not None:
            local = _LocalRule(compiled, dtstart, until, _local(stop, tz) if stop is not None else None, tz, spec.duration)
            found = _dense_expand(dense, local, low=floor, high=local_to, walk=walk)
            return [(b, f) for b, f in _merged(found) if b < end and f > start], None
        latest = _latest_before(compiled, dtstart, until, floor, cut, walk) if floor < cut else None
        local_from = max(floor, latest - LOOKBACK) if latest is not None else cut
        rule = _rule(compiled.body, _forward(compiled, dtstart, local_from), until)
        for local_start in walk.starts(rule, local_from, local_to):
            begin = _instant(local_start, tz)
            finish = _instant(local_start + spec.duration, tz)
            if (stop is None or begin < stop) and begin < finish:
                spans.append((begin, finish))
    except _Spent as out:
        spent = _instant(out.last, tz)
        if stop is None or spent < stop:
            far = end + spec.duration + LOOKBACK
            spans.append((spent, far if stop is None else min(far, max(stop + spec.duration, spent))))
    return [(b, f) for b, f in _merged(spans) if b < end and f > start], spent


def occurrences(
    spec: WindowSpec, start: datetime.datetime, end: datetime.datetime, *, budget: int = BUDGET
) -> list[tuple[datetime.datetime, datetime.datetime]]:
    """The spans (UTC) in which the window is in force that meet ``[start, end)``, in order, the
    window's overlapping or touching occurrences merged. A span that reaches outside the interval
    is seen as far as the search goes (a day or so beyond it): only its edges inside are exact.
    At most ``budget`` starts are walked (the module's docstring: what a rule beyond it gives)."""
    return _expand(spec, start, end, _Walk(budget))[0]


def in_force(spec: WindowSpec, at: datetime.datetime, *, budget: int = BUDGET) -> bool:
    moment = _aware(at)
    return any(begin <= moment < finish
               for begin, finish in occurrences(spec, moment, moment + datetime.timedelta(microseconds=1), budget=budget))


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


def edges(
    windows: Iterable[WindowSpec], start: datetime.datetime, end: datetime.datetime, *, budget: int = BUDGET
) -> list[Edge]:
    """Every begin and end of the windows' spans within ``[start, end)``, in time order: exactly
    the instants where the set of windows in force changes (an end at ``start`` included, so that
    consecutive ranges ``[a, b)``, ``[b, c)`` see every edge once)."""
    start, end = _aware(start), _aware(end)
    out = []
    for spec in windows:
        for begin, finish in occurrences(spec, start - datetime.timedelta(microseconds=1), end, budget=budget):
            if start <= begin < end:
                out.append(Edge(begin, spec.id, "begin"))
            if start <= finish < end:
                out.append(Edge(finish, spec.id, "end"))
    return sorted(out, key=lambda edge: (edge.at, edge.kind != "end", edge.window_id))


def _covers(spans: list[tuple[datetime.datetime, datetime.datetime]], begins: list[datetime.datetime],
            moment: datetime.datetime) -> bool:
    """Whether one of the merged (disjoint, ordered) ``spans`` holds ``moment``; ``begins`` their starts."""
    index = bisect_right(begins, moment) - 1
    return index >= 0 and moment < spans[index][1]


def timeline(
    *, guaranteed: Decimal, limit: Decimal, windows: Iterable[WindowSpec],
    span: tuple[datetime.datetime, datetime.datetime], priority_class_id: int | None = None, budget: int = BUDGET,
) -> list[Step]:
    """The step function of the effective numbers over ``span``, ``[start, end)``: consecutive
    steps with different numbers or different windows in force."""
    start, end = _aware(span[0]), _aware(span[1])
    specs = _applicable(windows, priority_class_id)
    spans = {spec.id: occurrences(spec, start, end, budget=budget) for spec in specs}
    begins = {wid: [begin for begin, _ in found] for wid, found in spans.items()}
    cuts = sorted({start, *(moment for found in spans.values() for span in found for moment in span
                            if start < moment < end)})
    steps: list[Step] = []
    for index, cut in enumerate(cuts):
        finish = cuts[index + 1] if index + 1 < len(cuts) else end
        active = [spec for spec in specs if _covers(spans[spec.id], begins[spec.id], cut)]
        value = _resolve(guaranteed, limit, active, priority_class_id)
        if steps and steps[-1].effective == value:
            steps[-1] = Step(steps[-1].start, finish, value)
        else:
            steps.append(Step(cut, finish, value))
    return steps


def next_edges(
    spec: WindowSpec, now: datetime.datetime, *, count: int, within: datetime.timedelta, budget: int = PAGE_BUDGET
) -> list[Edge]:
    """The window's first ``count`` edges after ``now`` (an end at ``now`` counts), looked for over
    growing spans up to ``within``, taking up at most ``budget`` starts in all: a page's worth, never
    a rule's whole horizon. Edges past where the budget ran out are not given (they would be the
    budget's, not the rule's)."""
    now = _aware(now)
    found: list[Edge] = []
    walk = _Walk(budget)
    for days in (2, 35, 400, None):
        span = within if days is None else min(within, datetime.timedelta(days=days))
        spans, spent = _expand(spec, now - datetime.timedelta(microseconds=1), now + span, walk)
        found = []
        for begin, finish in spans:
            for at, kind in ((begin, "begin"), (finish, "end")):
                if now <= at < now + span and (spent is None or at < spent):
                    found.append(Edge(at, spec.id, kind))
        if len(found) >= count or spent is not None or span >= within:
            break
    return sorted(found, key=lambda edge: (edge.at, edge.kind != "end"))[:count]


def lowest(
    *, guaranteed: Decimal, limit: Decimal, windows: Iterable[WindowSpec], start: datetime.datetime,
    end: datetime.datetime, priority_class_id: int | None = None,
) -> Effective:
    """The least guarantee and the least limit in force at any moment of ``[start, end)``: what a
    request over that interval must fit (a request that crosses a shrink must fit the shrunk quota)."""
    steps = timeline(guaranteed=guaranteed, limit=limit, windows=windows, span=(start, end),
                     priority_class_id=priority_class_id)
    least_g = min(steps, key=lambda step: step.effective.guaranteed).effective
    least_l = min(steps, key=lambda step: step.effective.limit).effective
    in_force_ids = tuple(sorted({wid for step in steps for wid in step.effective.in_force}))
    return Effective(least_g.guaranteed, least_l.limit, least_g.guaranteed_by, least_l.limit_by, in_force_ids)

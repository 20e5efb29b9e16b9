"""The pure rule of quota use over time (``allocations.quotas.in_use``) against a brute-force
evaluation minute by minute: every segment's use is what holds at each of its minutes, the peak is
the most held at any one minute (never more than the grants that meet at once), and adjacent
segments differ."""

from __future__ import annotations

import datetime
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from allocations.quotas import in_use, windows

UTC = datetime.UTC
START = datetime.datetime(2027, 3, 1, tzinfo=UTC)
MINUTE = datetime.timedelta(minutes=1)
SPAN = 60  # minutes


def at(minute: int) -> datetime.datetime:
    return START + minute * MINUTE


grants = st.lists(
    st.tuples(st.integers(-10, SPAN + 10), st.integers(1, 40), st.integers(1, 6)).map(
        lambda item: in_use.Held(at(item[0]), at(item[0] + item[1]), Decimal(item[2]))
    ),
    max_size=8,
)
shrinks = st.lists(st.tuples(st.integers(0, SPAN), st.integers(1, 30), st.integers(0, 8)), max_size=3)


def specs(found: list[tuple[int, int, int]]) -> list[windows.WindowSpec]:
    return [windows.WindowSpec(id=index + 1, kind="temporary", begins_at=at(begin), ends_at=at(begin + length),
                               limit=Decimal(limit)) for index, (begin, length, limit) in enumerate(found)]


@settings(max_examples=200, deadline=None)
@given(held=grants, cuts=shrinks)
def test_segments_say_what_holds_and_what_is_in_force_at_every_minute(
    held: list[in_use.Held], cuts: list[tuple[int, int, int]]
) -> None:
    found = specs(cuts)
    steps = windows.timeline(guaranteed=Decimal(0), limit=Decimal(10), windows=found, span=(at(0), at(SPAN)))
    segments = in_use.segments(held=held, steps=steps, start=at(0), end=at(SPAN))
    assert segments[0].start == at(0) and segments[-1].end == at(SPAN)
    for before, after in zip(segments, segments[1:], strict=False):
        assert before.end == after.start and (before.in_use, before.effective) != (after.in_use, after.effective)
    for minute in range(SPAN):
        moment = at(minute)
        segment = next(s for s in segments if s.start <= moment < s.end)
        assert segment.in_use == sum((h.amount for h in held if h.starts_at <= moment < h.ends_at), Decimal(0))
        assert segment.effective == windows.effective(guaranteed=Decimal(0), limit=Decimal(10), windows=found, at=moment)
    assert in_use.peak(segments) == max(in_use.in_use_at(held, at(minute)) for minute in range(SPAN))
    tightest = in_use.binding(segments)
    assert tightest.room() == min(segment.room() for segment in segments)


def test_two_grants_that_never_overlap_peak_at_the_larger() -> None:
    held = [in_use.Held(at(0), at(20), Decimal(6)), in_use.Held(at(20), at(40), Decimal(5))]
    steps = windows.timeline(guaranteed=Decimal(0), limit=Decimal(8), windows=[], span=(at(0), at(SPAN)))
    segments = in_use.segments(held=held, steps=steps, start=at(0), end=at(SPAN))
    assert [(s.start, s.end, s.in_use) for s in segments] == [
        (at(0), at(20), Decimal(6)), (at(20), at(40), Decimal(5)), (at(40), at(SPAN), Decimal(0))]
    assert in_use.peak(segments) == 6 and in_use.binding(segments).in_use == 6

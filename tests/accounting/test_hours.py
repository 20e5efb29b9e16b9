"""The pure hour arithmetic: intervals cut at UTC hour edges exactly, nothing counted twice,
local days of 23 and 25 hours, rounding once and half up."""

from __future__ import annotations

import datetime
import zoneinfo
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accounting.hours import as_decimal, gpu_hours, hour_floor, merged, seconds, seconds_by_hour

UTC = datetime.UTC
BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")
T0 = datetime.datetime(2026, 3, 28, 20, 0, tzinfo=UTC)


def at(minutes: float) -> datetime.datetime:
    return T0 + datetime.timedelta(minutes=minutes)


def test_an_interval_across_hour_edges_is_cut_exactly() -> None:
    found = seconds_by_hour([(at(20), at(160))], start=at(0), end=at(600))
    assert found == {at(0): Decimal(2400), at(60): Decimal(3600), at(120): Decimal(2400)}


def test_overlapping_intervals_count_once_and_the_range_clips_them() -> None:
    found = seconds_by_hour([(at(10), at(50)), (at(40), at(70)), (at(70), at(80))], start=at(15), end=at(75))
    assert found == {at(0): Decimal(45 * 60), at(60): Decimal(15 * 60)}
    assert merged([(at(10), at(50)), (at(40), at(70)), (at(70), at(80)), (at(90), at(90))]) == [(at(10), at(80))]


@pytest.mark.parametrize(("day", "hours"), [(datetime.date(2026, 3, 29), 23), (datetime.date(2026, 10, 25), 25)])
def test_a_local_day_of_a_clock_change_has_as_many_utc_hours_as_it_lasted(day: datetime.date, hours: int) -> None:
    begin = datetime.datetime.combine(day, datetime.time(), tzinfo=BERLIN)
    end = datetime.datetime.combine(day + datetime.timedelta(days=1), datetime.time(), tzinfo=BERLIN)
    found = seconds_by_hour([(begin, end)], start=begin - datetime.timedelta(days=1), end=end + datetime.timedelta(days=1))
    assert len(found) == hours and set(found.values()) == {Decimal(3600)}
    assert all(hour.tzinfo == UTC and hour.minute == 0 for hour in found)


def test_rounding_happens_once_half_up_and_floats_are_read_as_they_print() -> None:
    assert gpu_hours(Decimal(1)) == Decimal("0.000278")  # 0.0002777…
    assert gpu_hours(Decimal("0.0018")) == Decimal("0.000001")  # 0.0000005 rounds up
    assert as_decimal(0.1) == Decimal("0.1")
    assert seconds(datetime.timedelta(days=1, seconds=1, microseconds=5)) == Decimal("86401.000005")
    with pytest.raises(ValueError, match="aware"):
        hour_floor(datetime.datetime(2026, 1, 1, 10, 30))  # noqa: DTZ001 (the point of the test)


_MINUTES = st.integers(min_value=0, max_value=24 * 60)
_INTERVALS = st.lists(st.tuples(_MINUTES, st.integers(min_value=0, max_value=600)), max_size=8)


@given(intervals=_INTERVALS, clip=st.tuples(_MINUTES, _MINUTES))
def test_the_hours_add_up_to_the_union_inside_the_range_and_each_is_at_most_an_hour(
    intervals: list[tuple[int, int]], clip: tuple[int, int]
) -> None:
    spans = [(at(begin), at(begin + length)) for begin, length in intervals]
    start, end = at(min(clip)), at(max(clip))
    found = seconds_by_hour(spans, start=start, end=end)
    covered: set[int] = set()  # the union, minute by minute (every end point is a whole minute)
    for begin, length in intervals:
        covered.update(minute for minute in range(begin, begin + length) if min(clip) <= minute < max(clip))
    assert sum(found.values(), Decimal(0)) == Decimal(len(covered) * 60)
    assert all(Decimal(0) < value <= Decimal(3600) for value in found.values())
    assert all(start - datetime.timedelta(hours=1) < hour < end and hour == hour_floor(hour) for hour in found)

"""Worked examples of the effective-quota function (``allocations.quotas.windows``): the cases the
properties of ``test_windows_properties.py`` meet only by chance, each with numbers worked out by
hand from the calendar: the DST days (Berlin's 23- and 25-hour days, Lord Howe's half hour),
windows across midnight, days of the month a month lacks, COUNT and UNTIL, ``ends_at``, the
precedence (temporary over recurring, a class's own over department-wide, newest), the clamps, and
what is refused."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from allocations.quotas.windows import (
    WindowSpec,
    edges,
    effective,
    in_force,
    lowest,
    occurrences,
    parse_rrule,
    timeline,
)

UTC = datetime.UTC
D = Decimal
HOUR = datetime.timedelta(hours=1)


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime.datetime:
    return datetime.datetime(year, month, day, hour, minute, tzinfo=UTC)


def nightly(zone: str = "Europe/Berlin", rule: str = "FREQ=DAILY;BYHOUR=20;BYMINUTE=0", hours: float = 12,
            window_id: int = 1, begins: datetime.datetime | None = None, **values: Any) -> WindowSpec:
    return WindowSpec(id=window_id, kind="recurring", begins_at=begins or at(2026, 1, 1), rrule=rule, timezone=zone,
                      duration=datetime.timedelta(hours=hours), **values)


def festival(begins: datetime.datetime, ends: datetime.datetime, window_id: int = 1, **values: Any) -> WindowSpec:
    return WindowSpec(id=window_id, kind="temporary", begins_at=begins, ends_at=ends, **values)


def numbers(windows: list[WindowSpec], moment: datetime.datetime, base: tuple[int, int] = (4, 8),
            priority_class_id: int | None = None) -> tuple[Decimal, Decimal]:
    value = effective(guaranteed=D(base[0]), limit=D(base[1]), windows=windows, at=moment,
                      priority_class_id=priority_class_id)
    return value.guaranteed, value.limit


def test_a_night_window_lasts_11_hours_on_the_23_hour_day_and_13_on_the_25_hour_day_in_berlin() -> None:
    window = nightly()
    # 28 March 20:00 CET (19:00 UTC) to 29 March 08:00 CEST (06:00 UTC)
    assert occurrences(window, at(2026, 3, 28, 12), at(2026, 3, 29, 12)) == [(at(2026, 3, 28, 19), at(2026, 3, 29, 6))]
    # 24 October 20:00 CEST (18:00 UTC) to 25 October 08:00 CET (07:00 UTC)
    assert occurrences(window, at(2026, 10, 24, 12), at(2026, 10, 25, 12)) == [(at(2026, 10, 24, 18), at(2026, 10, 25, 7))]
    assert in_force(window, at(2026, 3, 29, 5, 59)) and not in_force(window, at(2026, 3, 29, 6))
    assert in_force(window, at(2026, 10, 25, 6, 59)) and not in_force(window, at(2026, 10, 25, 7))  # the 13th hour
    # an ordinary night: 20:00-08:00 CET is 19:00-07:00 UTC, 12 hours
    assert occurrences(window, at(2026, 3, 20, 12), at(2026, 3, 21, 12)) == [(at(2026, 3, 20, 19), at(2026, 3, 21, 7))]


def test_lord_howe_moves_half_an_hour_and_shanghai_not_at_all() -> None:
    howe = nightly("Australia/Lord_Howe")
    # 3 October 20:00 +10:30 (09:30 UTC) to 4 October 08:00 +11 (21:00 UTC on the 3rd): 11.5 hours
    assert occurrences(howe, at(2026, 10, 3, 6), at(2026, 10, 3, 12)) == [
        (at(2026, 10, 3, 9, 30), at(2026, 10, 3, 21))]
    shanghai = nightly("Asia/Shanghai")
    assert occurrences(shanghai, at(2026, 3, 28, 6), at(2026, 3, 28, 18)) == [(at(2026, 3, 28, 12), at(2026, 3, 29))]


def test_a_window_across_midnight_holds_until_its_morning_end() -> None:
    night = [nightly("Asia/Shanghai", limit_delta=D(4))]  # 20:00-08:00 in Shanghai (UTC+8): 12:00-24:00 UTC
    assert numbers(night, at(2026, 5, 4, 11, 59)) == (D(4), D(8))  # 19:59
    assert numbers(night, at(2026, 5, 4, 15, 59)) == (D(4), D(12))  # 23:59
    assert numbers(night, at(2026, 5, 4, 16)) == (D(4), D(12))  # midnight
    assert numbers(night, at(2026, 5, 4, 23, 59)) == (D(4), D(12))  # 07:59
    assert numbers(night, at(2026, 5, 5)) == (D(4), D(8))  # 08:00


def test_wall_times_that_a_dst_change_skips_or_repeats_follow_fold_0() -> None:
    gap = nightly(rule="FREQ=DAILY;BYHOUR=2;BYMINUTE=30", hours=1.5)
    # 29 March 02:30 does not exist: read with CET, 01:30 UTC; 04:00 CEST is 02:00 UTC
    assert occurrences(gap, at(2026, 3, 29), at(2026, 3, 29, 6)) == [(at(2026, 3, 29, 1, 30), at(2026, 3, 29, 2))]
    assert occurrences(nightly(rule="FREQ=DAILY;BYHOUR=2;BYMINUTE=30", hours=1), at(2026, 3, 29),
                       at(2026, 3, 29, 6)) == []  # 02:30 to 03:30 CEST would end before it starts
    # 25 October 02:30 happens twice: the first pass (CEST, 00:30 UTC) to 04:00 CET (03:00 UTC)
    assert occurrences(gap, at(2026, 10, 25), at(2026, 10, 25, 6)) == [(at(2026, 10, 25, 0, 30), at(2026, 10, 25, 3))]


def starts(window: WindowSpec, start: datetime.datetime, end: datetime.datetime) -> list[datetime.datetime]:
    return [edge.at for edge in edges([window], start, end) if edge.kind == "begin"]


def test_bymonthday_31_skips_the_months_without_a_31st() -> None:
    window = nightly("UTC", rule="FREQ=MONTHLY;BYMONTHDAY=31", hours=1, begins=at(2026, 1, 1, 9))
    assert [s.date() for s in starts(window, at(2026, 1, 1), at(2027, 1, 1))] == [
        datetime.date(2026, m, 31) for m in (1, 3, 5, 7, 8, 10, 12)]


def test_bymonthday_minus_1_is_each_months_last_day_february_29_in_a_leap_year() -> None:
    window = nightly("UTC", rule="FREQ=MONTHLY;BYMONTHDAY=-1", hours=1, begins=at(2026, 1, 1, 9))
    found = [s.date() for s in starts(window, at(2026, 1, 1), at(2028, 4, 1))]
    assert found[:4] == [datetime.date(2026, 1, 31), datetime.date(2026, 2, 28), datetime.date(2026, 3, 31),
                         datetime.date(2026, 4, 30)]
    assert found[-2:] == [datetime.date(2028, 2, 29), datetime.date(2028, 3, 31)] and len(found) == 27
    last_friday = nightly("UTC", rule="FREQ=MONTHLY;BYDAY=-1FR", hours=1, begins=at(2026, 1, 1, 9))
    assert [s.date() for s in starts(last_friday, at(2026, 1, 1), at(2026, 4, 1))] == [
        datetime.date(2026, 1, 30), datetime.date(2026, 2, 27), datetime.date(2026, 3, 27)]


def test_count_keeps_the_first_occurrences_and_until_in_utc_bounds_them_inclusively() -> None:
    march = (at(2026, 3, 1), at(2026, 3, 31))
    counted = nightly(rule="FREQ=DAILY;BYHOUR=20;COUNT=3", begins=at(2026, 3, 1, 19))
    assert [s.day for s in starts(counted, *march)] == [1, 2, 3]
    # 20:00 CET on 5 March is 19:00 UTC: the last start, whether UNTIL is in UTC or floating
    for until in ("20260305T190000Z", "20260305T200000"):
        bounded = nightly(rule=f"FREQ=DAILY;BYHOUR=20;UNTIL={until}", begins=at(2026, 3, 1, 19))
        assert [s.day for s in starts(bounded, *march)] == [1, 2, 3, 4, 5]
    earlier = nightly(rule="FREQ=DAILY;BYHOUR=20;UNTIL=20260305T185959Z", begins=at(2026, 3, 1, 19))
    assert [s.day for s in starts(earlier, *march)] == [1, 2, 3, 4]
    rule = parse_rrule("RRULE:FREQ=DAILY;UNTIL=20260401T000000Z", zone="Europe/Berlin", begins_at=at(2026, 3, 1, 19))
    found = list(rule)  # wall times in Berlin: UNTIL is 02:00 CEST on 1 April
    assert len(found) == 31 and found[-1] == datetime.datetime(2026, 3, 31, 20)  # noqa: DTZ001


def test_ends_at_cuts_the_occurrences_that_start_at_or_after_it_and_lets_a_started_one_run() -> None:
    cut = nightly(begins=at(2026, 3, 1, 19), ends_at=at(2026, 3, 5, 19))  # the instant the 5 March one starts
    assert [s.day for s in starts(cut, at(2026, 3, 1), at(2026, 3, 31))] == [1, 2, 3, 4]
    assert in_force(cut, at(2026, 3, 5, 6, 59)) and not in_force(cut, at(2026, 3, 5, 19))
    later = nightly(begins=at(2026, 3, 1, 19), ends_at=at(2026, 3, 5, 19, 1))
    assert [s.day for s in starts(later, at(2026, 3, 1), at(2026, 3, 31))] == [1, 2, 3, 4, 5]


def test_occurrences_that_overlap_or_touch_make_one_span_with_one_begin_and_one_end() -> None:
    long = nightly("UTC", hours=30, begins=at(2026, 5, 1, 20), ends_at=at(2026, 5, 3, 21))
    assert occurrences(long, at(2026, 5, 1), at(2026, 5, 10)) == [(at(2026, 5, 1, 20), at(2026, 5, 5, 2))]
    assert [(e.at, e.kind) for e in edges([long], at(2026, 5, 1), at(2026, 5, 10))] == [
        (at(2026, 5, 1, 20), "begin"), (at(2026, 5, 5, 2), "end")]
    touching = nightly("UTC", hours=24, begins=at(2026, 5, 1, 20), limit_delta=D(1))
    assert edges([touching], at(2026, 5, 2), at(2026, 5, 9)) == []
    assert len(timeline(guaranteed=D(1), limit=D(2), windows=[touching], span=(at(2026, 5, 2), at(2026, 5, 9)))) == 1


def test_an_edge_at_the_start_of_a_range_is_seen_once_by_consecutive_ranges() -> None:
    window = festival(at(2026, 6, 1, 8), at(2026, 6, 1, 9))
    first = edges([window], at(2026, 6, 1, 8, 30), at(2026, 6, 1, 9))
    second = edges([window], at(2026, 6, 1, 9), at(2026, 6, 1, 9, 30))
    assert first == [] and [(e.at, e.kind) for e in second] == [(at(2026, 6, 1, 9), "end")]


def test_a_temporary_window_wins_over_a_recurring_one_field_by_field() -> None:
    night = nightly("UTC", window_id=2, guaranteed=D(1), limit=D(2))  # newer, but recurring
    boost = festival(at(2026, 7, 1), at(2026, 7, 3), window_id=1, limit_delta=D(4))
    both = [night, boost]
    inside = effective(guaranteed=D(4), limit=D(8), windows=both, at=at(2026, 7, 1, 22))
    assert (inside.guaranteed, inside.limit, inside.guaranteed_by, inside.limit_by, inside.in_force) == (
        D(1), D(12), 2, 1, (1, 2))  # the delta counts from the base, not from the night's 2
    assert numbers(both, at(2026, 7, 1, 12)) == (D(4), D(12))
    assert numbers(both, at(2026, 7, 4, 22)) == (D(1), D(2))


def test_a_class_own_window_wins_over_a_department_wide_one_of_the_same_kind() -> None:
    training, evaluation = 7, 8
    own = nightly("UTC", window_id=1, limit=D(1), priority_class_id=training)
    wide = nightly("UTC", window_id=2, limit_delta=D(2))
    night = at(2026, 7, 1, 22)
    assert numbers([own, wide], night, priority_class_id=training) == (D(1), D(1))
    assert numbers([own, wide], night) == (D(4), D(10))
    assert numbers([own, wide], night, priority_class_id=evaluation) == (D(4), D(10))
    assert effective(guaranteed=D(4), limit=D(8), windows=[own, wide], at=night).in_force == (2,)
    cut = festival(at(2026, 7, 1), at(2026, 7, 2), window_id=3, limit_delta=D(-3))
    assert numbers([own, wide, cut], night, priority_class_id=training) == (D(4), D(5))


def test_among_equals_the_newest_window_wins() -> None:
    older, newer = nightly("UTC", window_id=9, limit=D(6)), nightly("UTC", window_id=5, limit=D(3))
    value = effective(guaranteed=D(0), limit=D(8), windows=[older, newer], at=at(2026, 7, 1, 22))
    assert (value.limit, value.limit_by) == (D(6), 9)


def test_the_guarantee_is_clamped_to_the_limit_and_nothing_goes_below_zero() -> None:
    night = at(2026, 7, 1, 22)
    assert numbers([nightly("UTC", limit=D(4))], night, base=(6, 8)) == (D(4), D(4))
    assert numbers([nightly("UTC", guaranteed_delta=D(10))], night, base=(6, 8)) == (D(8), D(8))
    assert numbers([nightly("UTC", limit_delta=D(-20))], night, base=(6, 8)) == (D(0), D(0))
    assert numbers([nightly("UTC", guaranteed_delta=D(-10))], night, base=(6, 8)) == (D(0), D(8))


def test_lowest_is_what_a_request_crossing_a_shrink_must_fit() -> None:
    night = nightly("UTC", limit=D(2), guaranteed=D(1), window_id=4)
    least = lowest(guaranteed=D(4), limit=D(8), windows=[night], start=at(2026, 7, 1, 12), end=at(2026, 7, 1, 21))
    assert (least.guaranteed, least.limit, least.limit_by, least.in_force) == (D(1), D(2), 4, (4,))
    day = lowest(guaranteed=D(4), limit=D(8), windows=[night], start=at(2026, 7, 1, 9), end=at(2026, 7, 1, 20))
    assert (day.guaranteed, day.limit, day.limit_by) == (D(4), D(8), None)


NAIVE = datetime.datetime(2026, 7, 1, 12)  # noqa: DTZ001 - refused on purpose


def test_naive_times_are_refused_even_without_windows() -> None:
    window = nightly("UTC")
    calls: list[Callable[[], object]] = [
        lambda: effective(guaranteed=D(1), limit=D(2), windows=[], at=NAIVE),
        lambda: timeline(guaranteed=D(1), limit=D(2), windows=[], span=(NAIVE, at(2026, 7, 2))),
        lambda: lowest(guaranteed=D(1), limit=D(2), windows=[window], start=at(2026, 7, 1), end=NAIVE),
        lambda: edges([window], NAIVE, at(2026, 7, 2)),
        lambda: in_force(window, NAIVE),
        lambda: in_force(nightly("UTC", begins=NAIVE), at(2026, 7, 2)),
        lambda: parse_rrule("FREQ=DAILY", zone="UTC", begins_at=NAIVE),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="timezone-aware"):
            call()


@pytest.mark.parametrize("text", [
    "", "FREQ=FOO", "BYHOUR=3", "FREQ=DAILY;;BYHOUR=3", "FREQ=DAILY;FREQ=WEEKLY", "FREQ=DAILY;BYHOUR=25",
    "FREQ=DAILY;INTERVAL=0", "FREQ=DAILY;INTERVAL=-1", "FREQ=DAILY;COUNT=0", "FREQ=DAILY;BYMONTHDAY=32",
    "FREQ=MONTHLY;BYMONTHDAY=-32", "FREQ=YEARLY;BYMONTH=13", "FREQ=DAILY;BYDAY=XX", "FREQ=DAILY;BYDAY=1MO",
    "FREQ=MONTHLY;BYDAY=6MO", "FREQ=MONTHLY;BYDAY=MO,-1FR", "FREQ=DAILY;COUNT=2;UNTIL=20260401T000000Z",
    "FREQ=DAILY;UNTIL=tomorrow", "FREQ=DAILY;FOO=1", "DTSTART:20260101T000000Z\nRRULE:FREQ=DAILY",
    "FREQ=DAILY;DTSTART=20260101T000000",
])
def test_a_bad_rrule_is_refused_with_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_rrule(text, zone="Europe/Berlin", begins_at=at(2026, 3, 1))


@pytest.mark.parametrize("zone", ["Not/AZone", "Europe", "../etc/passwd", "utc"])
def test_an_unknown_time_zone_is_a_value_error(zone: str) -> None:
    with pytest.raises(ValueError, match="time zone"):
        parse_rrule("FREQ=DAILY", zone=zone, begins_at=at(2026, 3, 1))
    with pytest.raises(ValueError, match="time zone"):
        in_force(nightly(zone), at(2026, 3, 2))


def test_an_old_window_is_evaluated_as_from_its_own_start() -> None:
    """Moving a rule's start forward by whole periods keeps its occurrences: a weekly rule begun 400
    days ago, a monthly one on the 31st, and one every 2 days give the same days as counted by hand."""
    weekly = nightly("UTC", rule="FREQ=WEEKLY;BYDAY=SA,SU;BYHOUR=0", hours=24, begins=at(2025, 5, 1))
    assert occurrences(weekly, at(2026, 6, 1), at(2026, 6, 8)) == [(at(2026, 6, 6), at(2026, 6, 8))]
    every_other = nightly("UTC", rule="FREQ=DAILY;INTERVAL=2", hours=1, begins=at(2025, 6, 1, 9))
    days = [s.date() for s in starts(every_other, at(2026, 6, 1), at(2026, 6, 7))]
    assert all((day - datetime.date(2025, 6, 1)).days % 2 == 0 for day in days) and len(days) == 3
    monthly = nightly("UTC", rule="FREQ=MONTHLY;INTERVAL=2", hours=1, begins=at(2025, 1, 31, 9))
    assert [s.date() for s in starts(monthly, at(2026, 1, 1), at(2027, 1, 1))] == [
        datetime.date(2026, m, 31) for m in (1, 3, 5, 7)]  # Sep and Nov lack a 31st

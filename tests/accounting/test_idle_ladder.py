"""The idle ladder, pure: streaks, the moves, keeps, policy matching, and (Hypothesis) a simulated
grant whose readings come late, unknown or never, driven through the ladder the way the periodic
evaluation drives it, against independent checks: never an action on unknown data, never without a
warning at least the grace earlier, keeps limited to ``max_keeps`` in any 7 days."""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from allocations.grants import idle_ladder as ladder
from allocations.grants.idle_ladder import Bucket, Move, OpenCase, Reading, Rules
from allocations.grants.idle_matching import PolicyScope, policy_for

T0 = datetime.datetime(2026, 11, 2, 8, 0, tzinfo=datetime.UTC)
FIVE = datetime.timedelta(minutes=5)
RULES = Rules(window_minutes=60, grace_minutes=30)


def buckets(readings: str, *, start: datetime.datetime = T0) -> list[Bucket]:
    """``i`` idle, ``b`` busy, ``u`` unknown, ``-`` no row at all; one character per 5 minutes."""
    out = []
    for index, char in enumerate(readings):
        if char == "-":
            continue
        reading = {"i": Reading.IDLE, "b": Reading.BUSY, "u": Reading.UNKNOWN}[char]
        activity = {"i": 0.01, "b": 0.6, "u": None}[char]
        out.append(Bucket(start=start + index * FIVE, reading=reading, activity=activity))
    return out


def last_of(readings: str) -> datetime.datetime:
    return T0 + (len(readings) - 1) * FIVE


def test_a_reading_is_unknown_without_activity_idle_below_the_threshold_and_busy_at_it() -> None:
    assert ladder.reading_of(None, threshold=0.05) is Reading.UNKNOWN
    assert ladder.reading_of(0.0499, threshold=0.05) is Reading.IDLE
    assert ladder.reading_of(0.05, threshold=0.05) is Reading.BUSY


def test_the_streak_counts_idle_back_to_the_newest_busy_bucket_and_skips_unknown_ones() -> None:
    found = ladder.streak(buckets("iiibiuui-i"))
    assert found.idle_minutes == 15  # the i, i, i after the b (unknown and missing skipped)
    assert found.idle_since == T0 + 4 * FIVE
    assert found.busy_at == T0 + 3 * FIVE
    assert found.unknown == 2
    assert found.newest_known is not None and found.newest_known.start == T0 + 9 * FIVE


def test_a_case_opens_at_half_the_window_and_is_warned_at_the_window() -> None:
    opened = ladder.step(case=None, buckets=buckets("b" + "i" * 6), rules=RULES, now=last_of("b" + "i" * 6) + FIVE,
                         last_bucket=last_of("b" + "i" * 6))
    assert opened.move is Move.OPEN and opened.idle_minutes == 30
    readings = "b" + "i" * 12
    warned = ladder.step(case=None, buckets=buckets(readings), rules=RULES, now=last_of(readings) + FIVE,
                         last_bucket=last_of(readings))
    assert warned.move is Move.WARN and warned.idle_since == T0 + FIVE
    assert warned.action_due_at == last_of(readings) + FIVE + datetime.timedelta(minutes=30)


def test_unknown_buckets_pause_the_clock_they_never_advance_it() -> None:
    readings = "b" + "i" * 6 + "u" * 20 + "i" * 5
    step = ladder.step(case=None, buckets=buckets(readings), rules=RULES, now=last_of(readings) + FIVE,
                       last_bucket=last_of(readings))
    assert step.idle_minutes == 55 and step.move is Move.OPEN  # 11 known idle buckets: not yet the window


def test_nothing_moves_up_on_stale_data() -> None:
    readings = "b" + "i" * 20 + "uuu"  # the newest three buckets unknown
    step = ladder.step(case=None, buckets=buckets(readings), rules=RULES, now=last_of(readings) + FIVE,
                       last_bucket=last_of(readings))
    assert step.move is Move.NONE


def test_a_busy_bucket_since_the_case_opened_clears_it() -> None:
    readings = "b" + "i" * 12 + "b" + "i"
    case = OpenCase("warned", idle_since=T0 + FIVE, warned_at=T0 + 13 * FIVE, action_due_at=T0 + 19 * FIVE)
    step = ladder.step(case=case, buckets=buckets(readings), rules=RULES, now=last_of(readings) + FIVE,
                       last_bucket=last_of(readings))
    assert step.move is Move.CLEAR
    assert re.fullmatch(r"busy again at \d{4}-\d\d-\d\d \d\d:\d\d UTC", step.why)  # the case's reason, for people


def test_the_action_comes_once_the_grace_has_known_idle_minutes_after_the_warning() -> None:
    warned_at = T0 + 13 * FIVE
    case = OpenCase("warned", idle_since=T0 + FIVE, warned_at=warned_at, action_due_at=warned_at + 6 * FIVE)
    readings = "b" + "i" * 12 + "i" * 5  # five known idle buckets after the warning: 25 of 30 minutes
    early = ladder.step(case=case, buckets=buckets(readings), rules=RULES, now=warned_at + 7 * FIVE,
                        last_bucket=last_of(readings))
    assert early.move is Move.UPDATE and early.since_warning_minutes == 25
    readings += "i"
    due = ladder.step(case=case, buckets=buckets(readings), rules=RULES, now=warned_at + 7 * FIVE,
                      last_bucket=last_of(readings))
    assert due.move is Move.ACT and due.since_warning_minutes == 30


def test_unknown_data_after_the_warning_extends_the_grace() -> None:
    warned_at = T0 + 13 * FIVE
    case = OpenCase("warned", idle_since=T0 + FIVE, warned_at=warned_at, action_due_at=warned_at + 6 * FIVE)
    readings = "b" + "i" * 12 + "u" * 12 + "i" * 3
    step = ladder.step(case=case, buckets=buckets(readings), rules=RULES, now=last_of(readings) + FIVE,
                       last_bucket=last_of(readings))
    assert step.move is Move.UPDATE  # the deadline passed, but only 15 known idle minutes since the warning


def test_keeps_are_counted_over_any_seven_days() -> None:
    now = T0 + datetime.timedelta(days=10)
    kept = [now - datetime.timedelta(days=8), now - datetime.timedelta(days=6), now - datetime.timedelta(hours=1)]
    assert ladder.keeps_left(kept_at=kept, now=now, max_keeps=2) == 0
    assert ladder.keeps_left(kept_at=kept, now=now, max_keeps=3) == 1
    assert ladder.keeps_left(kept_at=kept[:1], now=now, max_keeps=2) == 2


def test_the_most_specific_policy_applies() -> None:
    scopes = [
        PolicyScope(1, None, None, None),  # everywhere
        PolicyScope(2, 10, None, None),  # the organisation
        PolicyScope(3, 20, None, None),  # the department
        PolicyScope(4, 20, None, 7),  # the department's preemptible class
        PolicyScope(5, 20, 99, None),  # the department on another cluster
        PolicyScope(6, 30, None, None),  # another department
    ]
    chain = [20, 10]
    assert policy_for(scopes, chain=chain, cluster_id=1, priority_class_id=8) == 3
    assert policy_for(scopes, chain=chain, cluster_id=1, priority_class_id=7) == 4
    assert policy_for(scopes, chain=[10], cluster_id=1, priority_class_id=7) == 2
    assert policy_for(scopes, chain=[40], cluster_id=1, priority_class_id=7) == 1
    assert policy_for(scopes[5:], chain=chain, cluster_id=1, priority_class_id=7) is None
    assert policy_for([PolicyScope(1, None, None, None), PolicyScope(9, None, None, None)], chain=chain,
                      cluster_id=1, priority_class_id=None) == 9  # the newest among equals


# --------------------------------------------------------------------------- the simulated grant

KINDS = st.sampled_from(["i", "i", "i", "i", "b", "u"])  # mostly idle, so the ladder gets far


@dataclass
class Sim:
    rules: Rules
    max_keeps: int
    keep_hours: int
    arrivals: dict[datetime.datetime, Bucket] = field(default_factory=dict)  # visible by arrival time
    case: OpenCase | None = None
    rearm_at: datetime.datetime | None = None
    kept_at: list[datetime.datetime] = field(default_factory=list)
    acted: list[tuple[datetime.datetime, OpenCase, list[Bucket]]] = field(default_factory=list)
    warned: list[tuple[datetime.datetime, list[Bucket]]] = field(default_factory=list)


def visible(all_buckets: list[tuple[Bucket, datetime.datetime]], now: datetime.datetime) -> list[Bucket]:
    return [bucket for bucket, arrives in all_buckets if arrives <= now]


@settings(max_examples=200, deadline=None)
@given(
    readings=st.lists(st.tuples(KINDS, st.sampled_from([0, 0, 0, 1, 3, None])), min_size=10, max_size=220),
    window=st.sampled_from([15, 30, 60, 120]),
    grace=st.sampled_from([5, 15, 30, 60]),
    max_keeps=st.integers(min_value=0, max_value=3),
    keep_hours=st.sampled_from([1, 24]),
    keeps=st.sets(st.integers(min_value=0, max_value=219), max_size=12),
)
def test_the_ladder_never_acts_on_unknown_data_or_without_a_warning_and_keeps_are_limited(
    readings: list[tuple[str, int | None]], window: int, grace: int, max_keeps: int, keep_hours: int, keeps: set[int],
) -> None:
    """Each bucket's row (``u``: one whose coverage was too low to give an activity) arrives ``delay``
    buckets after it ends (``None``: never). Every 5 minutes
    the ladder sees what has arrived since the grant may be watched; the owner tries to keep the
    case at the steps in ``keeps``. Checked against the readings themselves, not the ladder."""
    rules = Rules(window_minutes=window, grace_minutes=grace)
    sim = Sim(rules=rules, max_keeps=max_keeps, keep_hours=keep_hours)
    timeline: list[tuple[Bucket, datetime.datetime]] = []
    for index, (kind, delay) in enumerate(readings):
        start = T0 + index * FIVE
        if delay is None:  # never arrives: no row at all
            continue
        bucket = buckets(kind, start=start)[0]
        timeline.append((bucket, start + FIVE + delay * FIVE))
    refused_keeps = 0
    for index in range(len(readings)):
        now = T0 + (index + 1) * FIVE + datetime.timedelta(seconds=30)
        last = ladder.last_complete_bucket(now)
        if sim.case is None and sim.rearm_at is not None and sim.rearm_at > now:
            continue
        since = max(T0, last - ladder.look_back(rules) + FIVE, sim.rearm_at or T0)
        seen = [bucket for bucket in visible(timeline, now) if bucket.start >= since]
        result = ladder.step(case=sim.case, buckets=seen, rules=rules, now=now, last_bucket=last)
        if result.move is Move.OPEN:
            assert result.idle_since is not None
            sim.case = OpenCase("observing", result.idle_since)
        elif result.move is Move.WARN:
            assert result.idle_since is not None and result.action_due_at is not None
            sim.case = OpenCase("warned", sim.case.idle_since if sim.case else result.idle_since, now, result.action_due_at)
            sim.warned.append((now, seen))
        elif result.move is Move.CLEAR:
            sim.case = None
        elif result.move is Move.ACT:
            assert sim.case is not None
            sim.acted.append((now, sim.case, seen))
            break
        if index in keeps and sim.case is not None:  # the owner keeps it, if the policy still allows
            if ladder.keeps_left(kept_at=sim.kept_at, now=now, max_keeps=max_keeps) > 0:
                sim.kept_at.append(now)
                sim.case, sim.rearm_at = None, now + datetime.timedelta(hours=keep_hours)
            else:
                refused_keeps += 1

    for now, seen in sim.warned:  # a warning needs the window in known idle minutes, on fresh data
        known = [bucket for bucket in seen if bucket.reading is not Reading.UNKNOWN]
        assert known and known[-1].reading is Reading.IDLE
        assert known[-1].start > ladder.last_complete_bucket(now) - 2 * FIVE
    for now, case, seen in sim.acted:
        assert case.state == "warned" and case.warned_at is not None  # one warning before any action
        assert now - case.warned_at >= datetime.timedelta(minutes=grace)
        after = [bucket for bucket in seen if bucket.start >= ladder.bucket_floor(case.warned_at)]
        assert 5 * sum(bucket.reading is Reading.IDLE for bucket in after) >= grace  # known idle, not unknown
        assert not any(bucket.reading is Reading.BUSY for bucket in seen if bucket.start >= case.idle_since)
        known = [bucket for bucket in seen if bucket.reading is not Reading.UNKNOWN]
        assert known[-1].reading is Reading.IDLE  # the newest data says idle ...
        assert known[-1].start > ladder.last_complete_bucket(now) - 2 * FIVE  # ... and is fresh
    for moment in sim.kept_at:  # keeps within any 7 days never exceed the policy's number
        assert sum(1 for other in sim.kept_at if moment - ladder.KEEP_SPAN < other <= moment) <= max_keeps


@settings(max_examples=60, deadline=None)
@given(window=st.sampled_from([15, 30, 60, 120]), grace=st.sampled_from([5, 15, 30, 60]),
       lead=st.integers(min_value=0, max_value=10))
def test_a_grant_idle_on_fresh_data_is_warned_at_its_window_and_acted_on_at_its_grace(
    window: int, grace: int, lead: int
) -> None:
    """The other side: with every reading on time and idle, the ladder warns as soon as the window
    is reached and acts as soon as the grace has passed (one evaluation every 5 minutes)."""
    rules = Rules(window_minutes=window, grace_minutes=grace)
    readings = "b" * lead + "i" * ((window + grace) // 5 + 3)
    case: OpenCase | None = None
    warned_at = acted_at = None
    for index in range(lead, len(readings)):
        now = T0 + (index + 1) * FIVE + datetime.timedelta(seconds=30)
        last = ladder.last_complete_bucket(now)
        seen = [b for b in buckets(readings) if b.start <= last]
        result = ladder.step(case=case, buckets=seen, rules=rules, now=now, last_bucket=last)
        if result.move is Move.OPEN:
            assert result.idle_since is not None
            case = OpenCase("observing", result.idle_since)
        elif result.move is Move.WARN:
            assert result.idle_since is not None and result.action_due_at is not None
            case = OpenCase("warned", result.idle_since, now, result.action_due_at)
            warned_at = index
        elif result.move is Move.ACT:
            acted_at = index
            break
    assert warned_at == lead + window // 5 - 1
    assert acted_at == warned_at + grace // 5


RUNS = st.lists(st.tuples(st.sampled_from("ibu-"), st.integers(min_value=1, max_value=40)), max_size=6).map(
    lambda runs: "".join(kind * length for kind, length in runs)
)


@settings(max_examples=200, deadline=None)
@given(readings=RUNS, observing=st.booleans(),
       window=st.sampled_from([15, 30, 60, 120]), grace=st.sampled_from([5, 15, 30, 60]))
def test_no_action_without_a_warned_case_whatever_the_readings(
    readings: str, observing: bool, window: int, grace: int
) -> None:
    rules = Rules(window_minutes=window, grace_minutes=grace)
    case = OpenCase("observing", T0) if observing else None
    now = T0 + (len(readings) + 1) * FIVE
    step = ladder.step(case=case, buckets=buckets(readings), rules=rules, now=now, last_bucket=ladder.last_complete_bucket(now))
    assert step.move is not Move.ACT

"""The idle ladder, pure (no Django): readings in, the next move of a grant's idle case out.

A grant's 5-minute buckets read **idle** (known activity below the policy's threshold), **busy**
(known, at or above it) or **unknown** (no row, or a row whose coverage was too low to give an
activity). Unknown is never idle: it pauses the clock, it never advances it.

* The **streak** is what the buckets say, newest first: the known idle minutes since the newest
  busy bucket (unknown buckets skipped), and when that idle run began.
* A grant idle for half its window opens a case (**observing**); idle for the whole window it is
  **warned**, and the action is due ``grace`` later. The warning is the one notice every action
  needs: nothing acts on a case that was not warned first.
* The action (notify: nothing more; reclaim: the grant is reclaimed) comes only when the deadline
  has passed, the known idle minutes *since the warning* reach the grace (unknown buckets extend
  it), no bucket since the case opened was busy, and the newest data is fresh: a known idle bucket
  among the last ``FRESH_BUCKETS``. Late or missing data therefore delays an action, never causes one.
* Any busy bucket since the idle run that opened the case **clears** it.
* Keeps are counted over any 7 days (``keeps_left``); a kept or exempted case holds the grant off
  until its end, after which the clock starts from nothing (the caller passes only the buckets
  after that end).
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from kernel.times import minute_utc

BUCKET = datetime.timedelta(minutes=5)
BUCKET_MINUTES = 5
FRESH_BUCKETS = 2
"""The newest known bucket must be one of the last two complete buckets for any step up the ladder."""
KEEP_SPAN = datetime.timedelta(days=7)


class Reading(enum.Enum):
    IDLE = "idle"
    BUSY = "busy"
    UNKNOWN = "unknown"


def reading_of(activity: float | None, *, threshold: float) -> Reading:
    """A bucket's reading: unknown without an activity, idle below ``threshold``, busy otherwise."""
    if activity is None:
        return Reading.UNKNOWN
    return Reading.IDLE if activity < threshold else Reading.BUSY


@dataclass(frozen=True)
class Bucket:
    start: datetime.datetime
    reading: Reading
    activity: float | None = None


@dataclass(frozen=True)
class Rules:
    """The policy's numbers that the ladder needs."""

    window_minutes: int
    grace_minutes: int

    @property
    def observe_minutes(self) -> int:
        """A case opens (observing) at half the window, rounded up to whole buckets."""
        half = (self.window_minutes + 1) // 2
        return -(-half // BUCKET_MINUTES) * BUCKET_MINUTES


@dataclass(frozen=True)
class Streak:
    idle_minutes: int  # known idle minutes since the newest busy bucket
    idle_since: datetime.datetime | None  # start of the oldest idle bucket of that run
    busy_at: datetime.datetime | None  # start of the newest busy bucket
    newest_known: Bucket | None
    known: int  # known buckets
    unknown: int  # unknown buckets inside the run (paused)


def streak(buckets: Iterable[Bucket]) -> Streak:
    """Walk back from the newest bucket: idle ones count, unknown ones pause, the first busy one stops."""
    idle = unknown = known = 0
    since: datetime.datetime | None = None
    busy_at: datetime.datetime | None = None
    newest: Bucket | None = None
    for bucket in sorted(buckets, key=lambda b: b.start, reverse=True):
        if bucket.reading is Reading.UNKNOWN:
            if busy_at is None:
                unknown += 1
            continue
        known += 1
        if newest is None:
            newest = bucket
        if busy_at is not None:
            continue
        if bucket.reading is Reading.BUSY:
            busy_at = bucket.start
            continue
        idle += BUCKET_MINUTES
        since = bucket.start
    return Streak(idle_minutes=idle, idle_since=since, busy_at=busy_at, newest_known=newest, known=known, unknown=unknown)


def is_fresh(found: Streak, *, last_bucket: datetime.datetime) -> bool:
    """Whether the newest known bucket is one of the last ``FRESH_BUCKETS`` complete ones."""
    newest = found.newest_known
    return newest is not None and newest.start > last_bucket - FRESH_BUCKETS * BUCKET


@dataclass(frozen=True)
class OpenCase:
    """What the ladder needs of a case that is still open."""

    state: str  # "observing" or "warned"
    idle_since: datetime.datetime
    warned_at: datetime.datetime | None = None
    action_due_at: datetime.datetime | None = None


class Move(enum.Enum):
    NONE = "none"  # nothing to record
    OPEN = "open"  # a new case, observing
    WARN = "warn"  # a new case warned at once, or an observing case warned
    UPDATE = "update"  # the open case's numbers changed, not its state
    CLEAR = "clear"  # busy again: the case closes
    ACT = "act"  # the policy's action is due and the data says so


@dataclass(frozen=True)
class Step:
    move: Move
    idle_since: datetime.datetime | None
    idle_minutes: int
    action_due_at: datetime.datetime | None = None
    since_warning_minutes: int = 0  # known idle minutes after the warning
    why: str = ""
    streak: Streak | None = None  # what the readings said (step fills it in)


def since_warning(buckets: Iterable[Bucket], warned_at: datetime.datetime) -> int:
    """Known idle minutes in the buckets the warning did not know: those from the one it was given
    in (it went by the complete buckets before that)."""
    first = bucket_floor(warned_at)
    return sum(BUCKET_MINUTES for b in buckets if b.start >= first and b.reading is Reading.IDLE)


def step(
    *, case: OpenCase | None, buckets: Sequence[Bucket], rules: Rules, now: datetime.datetime,
    last_bucket: datetime.datetime,
) -> Step:  # fmt: skip
    """The next move for one grant: ``buckets`` are its readings from where it may be watched (a
    keep's or an exemption's end, its start, or the look-back) to ``last_bucket``, the newest
    complete bucket; missing buckets are simply absent (unknown)."""
    found = streak(buckets)
    return replace(_step(case=case, buckets=buckets, rules=rules, now=now, last_bucket=last_bucket, found=found),
                   streak=found)


def _step(
    *, case: OpenCase | None, buckets: Sequence[Bucket], rules: Rules, now: datetime.datetime,
    last_bucket: datetime.datetime, found: Streak,
) -> Step:  # fmt: skip
    fresh = is_fresh(found, last_bucket=last_bucket)
    if case is None:
        if not fresh or found.idle_since is None:
            return Step(Move.NONE, None, found.idle_minutes)
        if found.idle_minutes >= rules.window_minutes:
            due = now + datetime.timedelta(minutes=rules.grace_minutes)
            return Step(Move.WARN, found.idle_since, found.idle_minutes, action_due_at=due,
                        why=f"idle for {found.idle_minutes} known minutes (window {rules.window_minutes})")
        if found.idle_minutes >= rules.observe_minutes:
            return Step(Move.OPEN, found.idle_since, found.idle_minutes, why=f"idle for {found.idle_minutes} known minutes")
        return Step(Move.NONE, None, found.idle_minutes)
    if found.busy_at is not None and found.busy_at >= case.idle_since:
        return Step(Move.CLEAR, case.idle_since, found.idle_minutes, why=f"busy again at {minute_utc(found.busy_at)}")
    idle_minutes = found.idle_minutes if found.idle_since is not None else 0
    if case.state == "observing":
        if fresh and idle_minutes >= rules.window_minutes:
            due = now + datetime.timedelta(minutes=rules.grace_minutes)
            return Step(Move.WARN, case.idle_since, idle_minutes, action_due_at=due,
                        why=f"idle for {idle_minutes} known minutes (window {rules.window_minutes})")
        return Step(Move.UPDATE, case.idle_since, idle_minutes)
    assert case.warned_at is not None and case.action_due_at is not None, "a warned case has its warning and deadline"
    evidence = since_warning(buckets, case.warned_at)
    if fresh and now >= case.action_due_at and evidence >= rules.grace_minutes:
        return Step(Move.ACT, case.idle_since, idle_minutes, action_due_at=case.action_due_at,
                    since_warning_minutes=evidence,
                    why=f"still idle {evidence} known minutes after the warning (grace {rules.grace_minutes})")
    return Step(Move.UPDATE, case.idle_since, idle_minutes, action_due_at=case.action_due_at,
                since_warning_minutes=evidence)


def keeps_left(*, kept_at: Iterable[datetime.datetime], now: datetime.datetime, max_keeps: int) -> int:
    """How many more keeps the grant has: ``max_keeps`` less those within the last 7 days."""
    recent = sum(1 for moment in kept_at if now - KEEP_SPAN < moment <= now)
    return max(0, max_keeps - recent)


def look_back(rules: Rules) -> datetime.timedelta:
    """How far back the readings are read: twice the window and grace, at least 6 hours and at most
    8 days. A shorter look-back only shortens runs, so it can delay an action, never cause one."""
    span = datetime.timedelta(minutes=2 * (rules.window_minutes + rules.grace_minutes))
    return min(max(span, datetime.timedelta(hours=6)), datetime.timedelta(days=8))


def bucket_floor(moment: datetime.datetime) -> datetime.datetime:
    """The start of the 5-minute bucket ``moment`` falls in (UTC)."""
    epoch = int(moment.timestamp())
    return datetime.datetime.fromtimestamp(epoch - epoch % int(BUCKET.total_seconds()), tz=datetime.UTC)


def last_complete_bucket(now: datetime.datetime) -> datetime.datetime:
    """The newest bucket that has ended by ``now``."""
    return bucket_floor(now) - BUCKET

"""What a quota's department holds at an instant and over an interval, pure (no database).

A grant holds at the instant ``t`` when its interval ``[starts_at, ends_at)`` contains ``t``
(whatever its holding state: a scheduled grant whose start has come holds, one that has ended does
not). What is *in use* at ``t`` is the sum of the grants that hold at ``t``. Over an interval it is
a step function, cut at every grant's start and end and at every edge of the quota's windows
(``windows.timeline``, the one rule of the numbers in force); each segment carries what holds
during it and the numbers in force. The use over an interval is its *peak*, the most held at any
one moment, never the sum of grants that do not overlap.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from allocations.quotas.windows import Effective, Step

ZERO = Decimal(0)
INSTANT = datetime.timedelta(microseconds=1)
"""An instant ``t`` as an interval: ``[t, t + INSTANT)``."""


@dataclass(frozen=True)
class Held:
    """One grant's weight in a quota's scope, over its interval."""

    starts_at: datetime.datetime
    ends_at: datetime.datetime
    amount: Decimal

    def holds_at(self, at: datetime.datetime) -> bool:
        return self.starts_at <= at < self.ends_at


@dataclass(frozen=True)
class Segment:
    """``[start, end)``, during which what is held and the numbers in force do not change."""

    start: datetime.datetime
    end: datetime.datetime
    in_use: Decimal
    effective: Effective

    def room(self, *, factor: Decimal = Decimal(1)) -> Decimal:
        """The effective limit (times ``factor``) less what is held."""
        return self.effective.limit * factor - self.in_use


def in_use_at(held: Iterable[Held], at: datetime.datetime) -> Decimal:
    """The sum of the grants that hold at ``at``."""
    return sum((item.amount for item in held if item.holds_at(at)), ZERO)


def edges(held: Iterable[Held], start: datetime.datetime, end: datetime.datetime) -> set[datetime.datetime]:
    """The moments strictly within ``[start, end)`` where a grant starts or ends: the only ones at
    which what holds can change (admission's steps cut there too, ``effective_tree.QuotaView.steps``)."""
    return {moment for item in held for moment in (item.starts_at, item.ends_at) if start < moment < end}


def segments(*, held: Iterable[Held], steps: Sequence[Step], start: datetime.datetime,
             end: datetime.datetime) -> list[Segment]:
    """The use over ``[start, end)`` with the numbers in force (``steps``: the quota's
    ``windows.timeline`` over the same interval), merged where neither changes."""
    found = [item for item in held if item.starts_at < end and item.ends_at > start]
    cuts = {start, end, *(step.start for step in steps if start < step.start < end)} | edges(found, start, end)
    ordered = sorted(cuts)
    out: list[Segment] = []
    for begin, finish in zip(ordered, ordered[1:], strict=False):
        effective = next(step.effective for step in steps if step.start <= begin < step.end)
        value = in_use_at(found, begin)
        if out and out[-1].in_use == value and out[-1].effective == effective:
            out[-1] = Segment(out[-1].start, finish, value, effective)
        else:
            out.append(Segment(begin, finish, value, effective))
    return out


def peak(found: Sequence[Segment]) -> Decimal:
    """The most held at any one moment of the segments."""
    return max((segment.in_use for segment in found), default=ZERO)


def binding(found: Sequence[Segment], *, factor: Decimal = Decimal(1)) -> Segment:
    """The segment with the least room (the first of equals): the one a request over the whole
    interval must fit. With numbers that do not change, the one of the peak."""
    return min(found, key=lambda segment: (segment.room(factor=factor), segment.start))

"""Intervals of time, pure: the union of half-open ``[begin, finish)`` intervals.

Shared by the usage roll-up (``accounting.hours``: GPU-equivalent-hours per UTC hour) and the
fair-share tick (``allocations.fair_share.services``: decayed usage), which both count a unit's
overlapping reservations (a defragmentation move leaves two rows for a while) once.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable

Interval = tuple[datetime.datetime, datetime.datetime]


def merged(intervals: Iterable[Interval]) -> list[Interval]:
    """The union of the intervals, as disjoint intervals in order (touching ones joined)."""
    out: list[Interval] = []
    for begin, finish in sorted(intervals):
        if finish <= begin:
            continue
        if out and begin <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], finish))
        else:
            out.append((begin, finish))
    return out

"""What bookings held over time occupy at some instant of their union: the most held at once.

A booking holds what it takes over a span ``[begin, end)`` (seconds on any one clock). Bookings of
one place that never hold at the same instant do not add up: two grants booked one after the
other on the same GPU need it once. A picture of a cluster over an interval shows, per GPU and
node, the most its bookings hold at any one instant, so that a new unit placed beside them, and
held over all of their spans, fits at every instant (``placement.mig.MigGeometry.held``
does the same for MIG instances).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Span = tuple[float, float]
"""When a booking holds what it takes: ``[begin, end)``."""

ALWAYS: Span = (-math.inf, math.inf)
"""The span of a booking held at every instant (one whose interval is not known)."""


def at_one_instant(spans: Sequence[Span]) -> bool:
    """Whether some instant lies in every span (then everything booked is held at once)."""
    latest_begin, earliest_end = -math.inf, math.inf
    for begin, end in spans:
        if begin > latest_begin:
            latest_begin = begin
        if end < earliest_end:
            earliest_end = end
    return latest_begin < earliest_end


def peak_sum(items: Sequence[tuple[Span, int]]) -> int:
    """The largest sum of the amounts held at one instant."""
    if len(items) < 2:
        return items[0][1] if items else 0
    spans = [span for span, _ in items]
    if at_one_instant(spans):
        return sum(amount for _, amount in items)
    held = peak = 0
    for position, begins in sweep(spans):
        amount = items[position][1]
        held += amount if begins else -amount
        peak = max(peak, held)
    return peak


def sweep(spans: Sequence[Span]) -> list[tuple[int, bool]]:
    """The order in which the spans begin and end: (position in ``spans``, begins), an end before
    a beginning at the same instant. An empty span (ending where it begins) holds at no instant
    and is left out."""
    events = [(begin, 1, position) for position, (begin, end) in enumerate(spans) if begin < end]
    events += [(end, 0, position) for position, (begin, end) in enumerate(spans) if begin < end]
    events.sort()
    return [(position, bool(begins)) for _, begins, position in events]

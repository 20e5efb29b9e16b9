"""Pure arithmetic of GPU-equivalent-hours (no Django): UTC hours, intervals cut at hour edges,
exact decimals.

Seconds are kept as ``Decimal`` from the datetimes' microseconds, so an interval cut at an hour edge
gives its two parts exactly and nothing is counted twice or lost; amounts are rounded once, to
``PLACES``, when a row is made.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Decimal

from kernel.intervals import Interval as Interval  # re-exported: the roll-up and the tests read them here
from kernel.intervals import merged as merged

HOUR = datetime.timedelta(hours=1)
PLACES = Decimal("0.000001")
SECONDS_PER_HOUR = Decimal(3600)


def hour_floor(moment: datetime.datetime) -> datetime.datetime:
    """The start of the UTC hour ``moment`` falls in (an aware datetime in UTC)."""
    if moment.tzinfo is None:
        raise ValueError("hour_floor needs an aware datetime")
    return moment.astimezone(datetime.UTC).replace(minute=0, second=0, microsecond=0)


def day_floor(moment: datetime.datetime) -> datetime.datetime:
    """The start of the UTC day ``moment`` falls in."""
    return hour_floor(moment).replace(hour=0)


def hours_in(start: datetime.datetime, end: datetime.datetime) -> list[datetime.datetime]:
    """The UTC hours that begin in [start, end), both already on hour edges."""
    hours, hour = [], start
    while hour < end:
        hours.append(hour)
        hour += HOUR
    return hours


def seconds(span: datetime.timedelta) -> Decimal:
    """The exact number of seconds of ``span``."""
    return Decimal(span.days * 86400 + span.seconds) + Decimal(span.microseconds) / Decimal(1_000_000)


def seconds_by_hour(
    intervals: Iterable[Interval], *, start: datetime.datetime, end: datetime.datetime
) -> dict[datetime.datetime, Decimal]:
    """Seconds of the union of ``intervals`` inside [start, end), per UTC hour."""
    found: dict[datetime.datetime, Decimal] = defaultdict(Decimal)
    for begin, finish in merged(intervals):
        begin, finish = max(begin, start), min(finish, end)
        hour = hour_floor(begin) if begin < finish else finish
        while hour < finish:
            part_begin, part_end = max(begin, hour), min(finish, hour + HOUR)
            found[hour] += seconds(part_end - part_begin)
            hour += HOUR
    return dict(found)


def gpu_hours(gpu_seconds: Decimal) -> Decimal:
    """GPU-equivalent-seconds as GPU-equivalent-hours, rounded half up to ``PLACES``."""
    return (gpu_seconds / SECONDS_PER_HOUR).quantize(PLACES, rounding=ROUND_HALF_UP)


def hours_summed(total: Decimal | float | None) -> Decimal:
    """A SQL sum of hours (``PLACES`` each) to ``PLACES``: exact on PostgreSQL already; SQLite
    (``make run``) sums decimals as floats, a few units in the fifteenth digit off, and those add up
    where sums of several queries are added (``178.7184000000001``)."""
    return Decimal(total or 0).quantize(PLACES)


def as_decimal(value: float) -> Decimal:
    """A float reading as the decimal it prints as (``0.1`` is 0.1, not 0.1000000000000000055…)."""
    return Decimal(repr(value))

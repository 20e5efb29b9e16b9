"""The demo's past, played in the order it happened: each step of each story (a request, a
decision, a release) runs with the clock at the moment it stands for, so that its audit events,
and the allocation pages' timelines read from them, carry that moment. Before, the stories were
made at the seeding's moment and their rows dated back afterwards: the append-only, hash-chained
audit log cannot be dated back, so every timeline said everything happened when the demo was seeded.

The audit log only goes forward (an event is never dated before the one written before it,
``audit.services``), so the steps of all the stories run in one time order (``steps_play``), and
the organisation they happen in is seeded before the first of them (``demo_past_start``).
Django's ``auto_now`` fields stamp rows with the system clock; each step dates its allocation's
and bookings' rows to its moment too (``allocation_rows_date``)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass

from allocations.models import Allocation, Reservation
from kernel.clock import clock_at

DAY = datetime.timedelta(days=1)
HOUR = datetime.timedelta(hours=1)
PAST_DAYS = 11  # the organisation exists this long before the seeding: before the oldest story (10 days)


@dataclass(frozen=True)
class Step:
    at: datetime.datetime
    run: Callable[[], None]


def demo_past_start(now: datetime.datetime) -> datetime.datetime:
    """When the demo organisation came to be: before the first step of any story."""
    return now - PAST_DAYS * DAY


def steps_play(steps: list[Step]) -> None:
    """Run the steps oldest first (a story's own steps in their order), each at its moment."""
    for step in sorted(steps, key=lambda step: step.at):
        with clock_at(step.at):
            step.run()


def allocation_rows_date(allocation_id: int, at: datetime.datetime, *, created: bool = False) -> None:
    """Date the allocation's ``auto_now`` stamps (and, when it was just made, its creation) and its
    bookings made since to ``at``."""
    stamps = {"created_at": at, "updated_at": at} if created else {"updated_at": at}
    Allocation.objects.filter(pk=allocation_id).update(**stamps)
    Reservation.objects.filter(allocation_id=allocation_id, created_at__gt=at).update(created_at=at)

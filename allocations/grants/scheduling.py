"""Scheduled starts: an approved grant whose start is ahead (or whose victims are still running out
their notice: grants reclaimed for it, or giving back units to it) is ``scheduled``. It holds its
booking for its interval and nothing of it is on the cluster; the periodic ``allocations_start_due``
(every minute, by beat or in-process) moves it to ``approved`` and provisions it as an immediate
approval would."""

from __future__ import annotations

import datetime

from allocations.grants.notices import allocation_notify
from allocations.grants.reclaims import reclaims_outstanding
from allocations.grants.transitions import (
    allocation_audit,
    allocation_lock,
    allocation_move,
    allocation_snapshot,
    provision_enqueue,
)
from allocations.models import Allocation, AllocationState
from audit import actions
from kernel.clock import clock_now
from kernel.transactions import retry_on_deadlock
from notifications import events


def allocations_start_due(*, now: datetime.datetime | None = None) -> int:
    """Start every scheduled grant whose start has come and whose victims are gone; returns how many."""
    moment = now or clock_now()
    due = list(
        Allocation.objects.filter(state=AllocationState.SCHEDULED, starts_at__lte=moment, ends_at__gt=moment)
        .order_by("starts_at", "pk").values_list("pk", flat=True)
    )
    waiting = reclaims_outstanding(requester_ids=due)
    return sum(
        1 for allocation_id in due
        if allocation_id not in waiting and allocation_start(allocation_id=allocation_id, now=moment)
    )


@retry_on_deadlock()
def allocation_start(*, allocation_id: int, now: datetime.datetime) -> bool:
    allocation = allocation_lock(allocation_id)
    if allocation.state != AllocationState.SCHEDULED or allocation.starts_at > now:
        return False
    if reclaims_outstanding(requester_ids=[allocation.pk]):
        return False
    before = allocation_snapshot(allocation)
    allocation_move(allocation, AllocationState.APPROVED)
    allocation.save()
    provision_enqueue(allocation.pk)  # before the event, as in allocation_approve
    allocation_notify(events.STARTED, allocation)
    allocation_audit(actor=None, action=actions.ALLOCATION_STARTED, allocation=allocation, before=before)
    return True

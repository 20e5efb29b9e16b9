"""Notifications about allocations (docs/notifications.md): what each one says and whom it is for,
written into the notifications outbox in the transaction of the move it tells about. Each service
calls ``allocation_notify`` once, before its audit event; ``allocations_expiry_notices`` (every
15 minutes, by beat or the in-process clock) tells owners their grant ends in 7 days, then 1."""

from __future__ import annotations

import datetime
from typing import Any

from django.db import transaction

from allocations.models import Allocation, AllocationState
from kernel.clock import clock_now
from notifications import events
from notifications.events import Event
from notifications.outbox import notification_enqueue
from notifications.outbox_with_row import notification_enqueue_with_row
from notifications.recipients import department_admins, platform_admins

EXPIRY_THRESHOLDS_DAYS = (7, 1)
"""Days before a grant's end at which its owner is told, each once per end (a renewal starts over)."""
EXPIRY_NOTICE_STATES = (AllocationState.SCHEDULED, AllocationState.APPROVED, AllocationState.PROVISIONING,
                        AllocationState.ACTIVE, AllocationState.FAILED)


def allocation_payload(allocation: Allocation) -> dict[str, Any]:
    return {
        "allocation": allocation.pk, "project": allocation.project.slug, "flavor": allocation.flavor.name,
        "quantity": allocation.quantity, "state": allocation.state,
        "cluster": allocation.cluster.name if allocation.cluster_id and allocation.cluster else None,
        "starts_at": allocation.starts_at.isoformat(), "ends_at": allocation.ends_at.isoformat(),
    }


def _recipients(event: Event, allocation: Allocation) -> list[int]:
    if event is events.SUBMITTED:  # no department admin up the tree: platform admins decide
        admins = department_admins(department_id=allocation.project.department_id, exclude=allocation.requested_by_id)
        return admins or [user_id for user_id in platform_admins() if user_id != allocation.requested_by_id]
    if event is events.PUSH_FAILED:
        return platform_admins()
    return [allocation.requested_by_id]


def allocation_notify(event: Event, allocation: Allocation, *, dedupe_key: str | None = None, **extra: Any) -> bool:
    """Tell the people ``event`` is for about ``allocation`` (in the caller's transaction); False
    when ``dedupe_key`` was used before."""
    return notification_enqueue(
        event=event, recipients=_recipients(event, allocation), department_id=allocation.project.department_id,
        subject=f"allocation:{allocation.pk}", payload={**allocation_payload(allocation), **extra}, dedupe_key=dedupe_key,
    ) is not None


def allocation_insert_notified(event: Event, allocation: Allocation, **extra: Any) -> None:
    """Insert the new ``allocation`` and tell the people ``event`` is for about it, together (in the
    caller's transaction; one statement on PostgreSQL): what ``allocation.save()`` then
    ``allocation_notify`` write, in one round trip instead of two."""
    notification_enqueue_with_row(
        row=allocation, event=event, recipients=_recipients(event, allocation), department_id=allocation.project.department_id,
        subject_prefix="allocation:", payload={**allocation_payload(allocation), **extra}, id_key="allocation",
    )


def allocations_expiry_notices(*, now: datetime.datetime | None = None) -> int:
    """Tell the owner of every grant that ends within 7 days (then within 1) once per threshold;
    returns how many notices were written. A grant already within 1 day gets only that one."""
    moment = now or clock_now()
    horizon = moment + datetime.timedelta(days=max(EXPIRY_THRESHOLDS_DAYS))
    rows = (Allocation.objects.filter(state__in=EXPIRY_NOTICE_STATES, ends_at__gt=moment, ends_at__lte=horizon)
            .select_related("project", "flavor", "cluster").order_by("pk"))  # fmt: skip
    written = 0
    for allocation in rows:
        left = allocation.ends_at - moment
        days = min(d for d in EXPIRY_THRESHOLDS_DAYS if left <= datetime.timedelta(days=d))
        key = f"allocation:{allocation.pk}:expiring:{days}:{allocation.ends_at.isoformat()}"
        with transaction.atomic():
            written += allocation_notify(events.EXPIRING, allocation, dedupe_key=key, days=days)
    return written

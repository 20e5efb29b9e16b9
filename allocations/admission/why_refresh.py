"""The primary reason of every request that has not started, kept on its row for /metrics
(``Allocation.waiting_reason``, docs/pending.md): read by the periodic refresh, the stalest first,
at most ``REFRESH_MOST`` a tick, so that a tick's cost is bounded however long the queue is.

Derived data, rewritten each tick and never acted on: no audit event (nothing was decided), and a
row that changed state meanwhile is left alone (the update is conditional on its state)."""

from __future__ import annotations

import datetime

from django.db.models import F

from allocations.admission.reasons import WAITING_STATES
from allocations.admission.why import allocation_reason
from allocations.models import Allocation
from kernel.clock import clock_now

REFRESH_MOST = 500
"""Requests read per tick (each is one admission decision)."""


def waiting_reasons_refresh(*, now: datetime.datetime | None = None, most: int = REFRESH_MOST) -> int:
    """Read the primary reason of the ``most`` stalest waiting requests and keep it; how many were read."""
    now = now or clock_now()
    stalest = list(
        Allocation.objects.filter(state__in=WAITING_STATES)
        .select_related("project", "flavor", "priority_class", "cluster")
        .order_by(F("waiting_reason_at").asc(nulls_first=True), "pk")[:most]
    )
    for allocation in stalest:
        code = allocation_reason(allocation=allocation, now=now).code.value
        Allocation.objects.filter(pk=allocation.pk, state=allocation.state).update(
            waiting_reason=code, waiting_reason_at=now
        )
    return len(stalest)

"""Helpers of the quota-window tests: approved windows written directly (the services that ask for
and approve them are tested in test_window_api.py), requests, approvals and holdings."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Max
from django.utils import timezone

from allocations.catalogue.states import HOLDING_STATES
from allocations.grants import services
from allocations.models import Allocation, AllocationState, PriorityClass, Quota
from allocations.models.windows import QuotaWindow, WindowState
from audit.models import AuditEvent
from tests.conftest import World

HOUR = datetime.timedelta(hours=1)
DAY = datetime.timedelta(days=1)


def quota(world: World, department: str, flavor: str | None = None) -> Quota:
    return Quota.objects.get(department=getattr(world, department),
                             flavor=getattr(world, flavor) if flavor is not None else None)


def window(world: World, target: Quota, *, begins_at: datetime.datetime, ends_at: datetime.datetime | None = None,
           priority_class: PriorityClass | None = None, **values: Any) -> QuotaWindow:
    """An approved window: temporary when ``ends_at`` is given without ``rrule``, else recurring."""
    recurring = "rrule" in values
    fields = {name: (Decimal(value) if name in ("limit", "guaranteed", "limit_delta", "guaranteed_delta") else value)
              for name, value in values.items()}
    return QuotaWindow.objects.create(
        quota=target, priority_class=priority_class, kind="recurring" if recurring else "temporary",
        state=WindowState.APPROVED, begins_at=begins_at, ends_at=ends_at, requested_by=world.users["platform"],
        decided_by=world.users["platform"], decided_at=timezone.now(), **fields,
    )


def ask(world: World, *, quantity: int, start: datetime.datetime | None = None, length: datetime.timedelta = DAY,
        flavor: str = "a100", project: str = "llm", persona: str = "nlp_member", priority: str = "standard") -> Allocation:
    begins = start or timezone.now()
    return services.allocation_request(
        actor=world.users[persona], project=getattr(world, project), flavor=getattr(world, flavor), quantity=quantity,
        priority_class=getattr(world, priority), starts_at=begins, ends_at=begins + length, justification="experiment",
    )


def approve(world: World, allocation: Allocation, persona: str = "nlp_admin") -> Allocation:
    return services.allocation_approve(actor=world.users[persona], allocation_id=allocation.pk)


def granted(world: World, *, quantity: int, approver: str = "nlp_admin", **how: Any) -> Allocation:
    return approve(world, ask(world, quantity=quantity, **how), approver)


def held(department_ids: set[int], at: datetime.datetime, *, leaving: bool = False) -> int:
    """Units held at ``at`` in these departments (``leaving``: count the grants, and the units of
    grants, being reclaimed too)."""
    states = HOLDING_STATES if leaving else HOLDING_STATES - {AllocationState.RECLAIMING}
    return sum(quantity - (0 if leaving else units or 0) for quantity, units in Allocation.objects.filter(
        state__in=states, project__department_id__in=department_ids, starts_at__lte=at, ends_at__gt=at,
    ).values_list("quantity", "reclaim_units"))


def audit_head() -> int:
    """The audit log outlives each test's database flush: tests read what came after this."""
    return int(AuditEvent.objects.aggregate(head=Max("seq"))["head"] or 0)


def audit_since(seq: int, action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(seq__gt=seq, action=action).order_by("seq"))

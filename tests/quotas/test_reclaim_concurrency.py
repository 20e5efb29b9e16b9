"""Fifty approvals at once, on real PostgreSQL connections from real threads, each of a request that
would reclaim the same borrowed grant(s): no grant is reclaimed twice, no quota is over-committed
once they have all committed, and every refusal is a clean one.

``nlp`` (guaranteed 4) and ``vision`` (guaranteed 8) share ``acme``'s 12 GPU-equivalents; ``vision``
holds its 8 and borrows 4 more, so ``acme`` is full and each of ``nlp``'s 50 requests for one A100
can only be admitted by taking back what ``vision`` borrowed.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable
from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import F, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from allocations.catalogue.states import HOLDING_STATES
from allocations.grants import services
from allocations.grants.reclaims import allocations_reclaim_due
from allocations.grants.scheduling import allocations_start_due
from allocations.models import Allocation, AllocationState, PriorityClass, Quota
from audit.models import AuditEvent
from kernel.errors import CapacityExceeded, Conflict, QuotaExceeded
from tenants.access import department_parent_map, department_subtree_ids
from tenants.models import Department
from tests.conftest import World, requires_postgres
from tests.threads import all_at_once

pytestmark = [requires_postgres(), pytest.mark.django_db(transaction=True)]

APPROVALS = 50


LIMITS = {"acme": Decimal(12), "nlp": Decimal(12), "vision": Decimal(12)}


def contested(world: World) -> None:
    Quota.objects.all().delete()
    for department, guaranteed in ((world.acme, 0), (world.nlp, 4), (world.vision, 8)):
        Quota.objects.create(department=department, flavor=None, guaranteed=Decimal(guaranteed),
                             limit=LIMITS[department.slug])


def grant(world: World, persona: str, quantity: int, priority: PriorityClass) -> Allocation:
    pending = request(world, persona, quantity, priority)
    admin = {"nlp_member": "nlp_admin", "vision_member": "vision_admin"}[persona]
    return services.allocation_approve(actor=world.users[admin], allocation_id=pending.pk)


def request(world: World, persona: str, quantity: int, priority: PriorityClass) -> Allocation:
    start = timezone.now()
    project = world.llm if persona == "nlp_member" else world.seg
    return services.allocation_request(
        actor=world.users[persona], project=project, flavor=world.a100, quantity=quantity, priority_class=priority,
        starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="race",
    )


def approve_all_at_once(world: World, ids: list[int]) -> Counter[str]:
    def approval(allocation_id: int) -> Callable[[], str]:
        def job() -> str:
            try:
                return str(services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation_id).state)
            except QuotaExceeded:
                return "quota"
            except CapacityExceeded:
                return "capacity"
            except Conflict:
                return "conflict"

        return job

    return all_at_once([approval(allocation_id) for allocation_id in ids])


def held(department: Department, *, leaving: bool) -> Decimal:
    """GPU-equivalents the department's subtree holds; ``leaving``: counting the grants (and units)
    that are being reclaimed (they hold until their notice runs out) too."""
    states = HOLDING_STATES if leaving else HOLDING_STATES - {AllocationState.RECLAIMING}
    subtree = department_subtree_ids(root_ids=[department.pk], parents=department_parent_map())
    units = F("quantity") if leaving else F("quantity") - Coalesce("reclaim_units", Value(0))
    total = (
        Allocation.objects.filter(state__in=states, project__department_id__in=subtree)
        .aggregate(total=Sum(units * F("flavor__gpu_equivalents")))["total"]
    )
    return Decimal(total or 0)


def never_overcommitted(world: World, *, leaving: bool) -> None:
    for department in (world.acme, world.nlp, world.vision):
        assert held(department, leaving=leaving) <= LIMITS[department.slug], department.slug


def reclaim_events(allocation: Allocation, action: str) -> int:
    return AuditEvent.objects.filter(action=action, target_id=str(allocation.pk)).count()


def test_fifty_requests_racing_for_one_borrowed_grant_reclaim_it_once(world: World) -> None:
    assert connection.vendor == "postgresql"
    contested(world)
    grant(world, "vision_member", 8, world.standard)
    borrowed = grant(world, "vision_member", 4, world.standard)  # 15 minutes of notice
    ids = [request(world, "nlp_member", 1, world.standard).pk for _ in range(APPROVALS)]

    outcomes = approve_all_at_once(world, ids)

    # One takes a unit of the grant and waits out its notice; the others find it promised and acme full.
    assert outcomes == Counter({AllocationState.SCHEDULED: 1, "quota": APPROVALS - 1})
    borrowed.refresh_from_db()
    winner = Allocation.objects.get(pk__in=ids, state=AllocationState.SCHEDULED)
    assert borrowed.reclaim_units == 1 and borrowed.reclaimed_for_id == winner.pk
    assert reclaim_events(borrowed, "allocation.reclaiming") == 1
    assert Allocation.objects.filter(reclaimed_for__isnull=False).count() == 1
    never_overcommitted(world, leaving=False)
    later = timezone.now() + datetime.timedelta(minutes=16)
    assert allocations_reclaim_due(now=later) == 1 and allocations_start_due(now=later) == 1
    never_overcommitted(world, leaving=True)


def test_fifty_requests_racing_for_four_borrowed_grants_take_each_once(world: World) -> None:
    contested(world)
    PriorityClass.objects.filter(pk=world.preemptible.pk).update(preemptible=True)  # reclaimed at once
    world.preemptible.refresh_from_db()
    grant(world, "vision_member", 8, world.standard)
    borrowed = [grant(world, "vision_member", 1, world.preemptible) for _ in range(4)]
    ids = [request(world, "nlp_member", 1, world.standard).pk for _ in range(APPROVALS)]

    outcomes = approve_all_at_once(world, ids)

    # Four fit within nlp's guarantee, each taking one borrowed grant back; the fifth would borrow.
    assert outcomes == Counter({AllocationState.APPROVED: 4, "quota": APPROVALS - 4})
    takers = []
    for grant_row in borrowed:
        grant_row.refresh_from_db()
        assert grant_row.state == AllocationState.RECLAIMED
        assert reclaim_events(grant_row, "allocation.reclaiming") == 1
        assert reclaim_events(grant_row, "allocation.reclaimed") == 1
        takers.append(grant_row.reclaimed_for_id)
    approved = set(Allocation.objects.filter(pk__in=ids).exclude(state=AllocationState.PENDING).values_list("pk", flat=True))
    assert len(set(takers)) == 4 and set(takers) == approved
    never_overcommitted(world, leaving=True)
    assert held(world.acme, leaving=True) == LIMITS["acme"]

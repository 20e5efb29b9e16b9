"""A small history for the what-if tests: requests written as rows (the services are tested
elsewhere), dated where their story says."""

from __future__ import annotations

import datetime
from decimal import Decimal

from django.utils import timezone

from allocations.models import Allocation, AllocationState, Flavor, Quota, Reservation
from clusters.models import Node
from tenants.models import Project
from tests.conftest import World

HOUR = datetime.timedelta(hours=1)


def asked(world: World, *, project: Project, flavor: Flavor, quantity: int, at: datetime.datetime,
          hours: float, state: str = AllocationState.REJECTED) -> Allocation:
    """A request made ``at`` for ``hours`` hours (rejected by default: demand that never ran)."""
    allocation = Allocation.objects.create(
        project=project, flavor=flavor, quantity=quantity, priority_class=world.standard, starts_at=at,
        ends_at=at + hours * HOUR, justification="history", state=state, requested_by=world.users["nlp_member"],
    )
    Allocation.objects.filter(pk=allocation.pk).update(created_at=at)
    allocation.refresh_from_db()
    return allocation


def ran(world: World, *, project: Project, flavor: Flavor, quantity: int, at: datetime.datetime, hours: float,
        released_after: float | None) -> Allocation:
    """A grant booked ``at`` that ran ``released_after`` hours (None: it still holds)."""
    state = AllocationState.RELEASED if released_after is not None else AllocationState.ACTIVE
    allocation = asked(world, project=project, flavor=flavor, quantity=quantity, at=at, hours=hours, state=state)
    node = Node.objects.get(cluster=world.cluster, name="a100-0")
    for unit in range(quantity):
        reservation = Reservation.objects.create(allocation=allocation, unit=unit, node=node, gpu_indices=[unit],
                                                 gpu_milli=1000)
        Reservation.objects.filter(pk=reservation.pk).update(
            created_at=at, released_at=None if released_after is None else at + released_after * HOUR)
    return allocation


def over_nlp_limit(world: World, now: datetime.datetime | None = None) -> datetime.datetime:
    """Three days ago nlp asked for 6 A100s for two days, and an hour later for 6 more for two days:
    12 against its limit of 10 GPU-equivalents (its quota of A100s, 8 in the test world, raised to
    12 here, so that its limit in GPU-equivalents is what binds). Vision asked for 2 H100s in
    between."""
    Quota.objects.filter(department=world.nlp, flavor=world.a100).update(limit=Decimal(12))
    start = (now or timezone.now()) - datetime.timedelta(days=3)
    asked(world, project=world.llm, flavor=world.a100, quantity=6, at=start, hours=48)
    asked(world, project=world.seg, flavor=world.h100, quantity=2, at=start + 0.5 * HOUR, hours=24)
    asked(world, project=world.llm, flavor=world.a100, quantity=6, at=start + HOUR, hours=48)
    return start

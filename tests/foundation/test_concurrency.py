"""Fifty approvals at once, on real PostgreSQL connections from real threads, never over-commit
a quota or a cluster, and never deadlock."""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable

import pytest
from django.db import connection
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, AllocationState, Reservation
from allocations.quotas.usage import department_usage
from kernel.errors import CapacityExceeded, QuotaExceeded
from tests.conftest import World, build_world, requires_postgres
from tests.threads import all_at_once

pytestmark = [requires_postgres(), pytest.mark.django_db(transaction=True)]

APPROVALS = 50


def pending(world: World, *, persona: str, project: str) -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users[persona], project=getattr(world, project), flavor=world.a100, quantity=1,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1),
        justification="race",
    )


def approve_all_at_once(world: World, jobs: list[tuple[str, int]]) -> Counter[str]:
    def approval(persona: str, allocation_id: int) -> Callable[[], str]:
        def job() -> str:
            try:
                services.allocation_approve(actor=world.users[persona], allocation_id=allocation_id)
            except QuotaExceeded:
                return "quota"
            except CapacityExceeded:
                return "capacity"
            return "approved"

        return job

    return all_at_once([approval(persona, allocation_id) for persona, allocation_id in jobs])


def test_it_never_overcommits_a_department_quota_under_50_concurrent_approvals(world: World) -> None:
    assert connection.vendor == "postgresql"
    for _ in range(5):
        services.allocation_approve(
            actor=world.users["nlp_admin"], allocation_id=pending(world, persona="nlp_member", project="llm").pk
        )
    jobs = [("nlp_admin", pending(world, persona="nlp_member", project="llm").pk) for _ in range(APPROVALS)]

    outcomes = approve_all_at_once(world, jobs)

    assert outcomes == Counter({"approved": 3, "quota": 47})
    assert department_usage(department_ids=frozenset({world.nlp.pk}), flavor=world.a100) == 8
    held = Allocation.objects.filter(state__in=[AllocationState.ACTIVE, AllocationState.APPROVED,
                                                AllocationState.PROVISIONING])
    assert held.count() == 8


def test_it_never_overcommits_a_cluster_when_departments_race_for_its_last_gpus() -> None:
    world = build_world(a100_gpus=4)
    jobs = []
    for index in range(APPROVALS):
        if index % 2:
            jobs.append(("nlp_admin", pending(world, persona="nlp_member", project="llm").pk))
        else:
            jobs.append(("vision_admin", pending(world, persona="vision_member", project="seg").pk))

    outcomes = approve_all_at_once(world, jobs)

    assert outcomes == Counter({"approved": 4, "capacity": 46})
    granted = Allocation.objects.exclude(state__in=[AllocationState.PENDING]).count()
    assert granted == 4
    booked = Reservation.objects.filter(released_at__isnull=True).values_list("node__name", "gpu_indices")
    assert sorted((node, tuple(gpus)) for node, gpus in booked) == [("a100-0", (index,)) for index in range(4)]


def test_racing_approvals_carve_each_mig_slice_of_a_gpu_exactly_once() -> None:
    world = build_world(a100_gpus=1)
    jobs = []
    for _ in range(APPROVALS):
        start = timezone.now()
        allocation = services.allocation_request(
            actor=world.users["nlp_member"], project=world.llm, flavor=world.mig, quantity=1,
            priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1),
            justification="race",
        )
        jobs.append(("nlp_admin", allocation.pk))

    outcomes = approve_all_at_once(world, jobs)

    assert outcomes == Counter({"approved": 7, "capacity": 43})  # an A100 has seven 1g.10gb slots
    booked = Reservation.objects.filter(released_at__isnull=True).values_list("mig_start", flat=True)
    starts = sorted(start for start in booked if start is not None)
    assert starts == list(range(7))  # 1g.10gb may start at memory slices 0..6, each used once

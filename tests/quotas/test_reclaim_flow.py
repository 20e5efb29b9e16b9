"""The headline promise, end to end through the services: a department within its guarantee takes
back what a sibling borrowed, with notice, and starts once the notice ran out."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from django.utils import timezone

from allocations.grants import services
from allocations.grants.reclaims import allocations_reclaim_due
from allocations.grants.scheduling import allocations_start_due
from allocations.models import Allocation, AllocationState, PriorityClass, Quota
from audit.models import AuditEvent
from kernel.errors import FourEyes, QuotaExceeded
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)


def _quotas(world: World) -> None:
    Quota.objects.all().delete()
    Quota.objects.create(department=world.acme, flavor=None, guaranteed=Decimal("0"), limit=Decimal("14"))
    Quota.objects.create(department=world.nlp, flavor=None, guaranteed=Decimal("4"), limit=Decimal("10"))
    Quota.objects.create(department=world.vision, flavor=None, guaranteed=Decimal("8"), limit=Decimal("12"))


def ask(world: World, persona: str, project: str, quantity: int, *, priority: PriorityClass | None = None,
        starts_in: datetime.timedelta = datetime.timedelta(0)) -> Allocation:
    start = timezone.now() + starts_in
    return services.allocation_request(
        actor=world.users[persona], project=getattr(world, project), flavor=world.a100, quantity=quantity,
        priority_class=priority or world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1),
        justification="experiment",
    )


def test_a_department_within_its_guarantee_reclaims_what_a_sibling_borrowed(world: World) -> None:
    _quotas(world)
    kept = services.allocation_approve(actor=world.users["vision_admin"], allocation_id=ask(world, "vision_member", "seg", 8).pk)
    borrowed = services.allocation_approve(
        actor=world.users["vision_admin"], allocation_id=ask(world, "vision_member", "seg", 4).pk
    )
    request = ask(world, "nlp_member", "llm", 3)  # acme: 12 + 3 > 14, so one unit must go

    approved = services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=request.pk)

    borrowed.refresh_from_db()
    kept.refresh_from_db()
    assert borrowed.state == AllocationState.ACTIVE and borrowed.reclaim_units == 1  # gives back 1 of its 4
    assert borrowed.reclaimed_for_id == request.pk and borrowed.reclaim_deadline is not None
    assert "borrowed beyond the guarantee of department vision" in borrowed.reclaim_reason
    assert kept.reclaim_units is None and kept.state != AllocationState.RECLAIMING
    assert approved.state == AllocationState.SCHEDULED  # waits for the notice
    assert allocations_start_due() == 0

    later = timezone.now() + datetime.timedelta(minutes=16)
    assert allocations_reclaim_due(now=later) == 1
    assert allocations_start_due(now=later) == 1
    borrowed.refresh_from_db()
    approved.refresh_from_db()
    assert borrowed.state == AllocationState.ACTIVE and borrowed.quantity == 3 and borrowed.reclaim_units is None
    assert approved.state in (AllocationState.APPROVED, AllocationState.PROVISIONING, AllocationState.ACTIVE)
    assert AuditEvent.objects.filter(action="allocation.reclaimed", target_id=str(borrowed.pk)).exists()


def test_a_request_beyond_its_guarantee_reclaims_nothing(world: World) -> None:
    _quotas(world)
    for quantity in (8, 4):
        services.allocation_approve(
            actor=world.users["vision_admin"], allocation_id=ask(world, "vision_member", "seg", quantity).pk
        )
    with pytest.raises(QuotaExceeded):
        services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=ask(world, "nlp_member", "llm", 5).pk)
    assert not Allocation.objects.filter(state=AllocationState.RECLAIMING).exists()


def test_bookings_that_do_not_overlap_do_not_conflict(world: World) -> None:
    _quotas(world)
    services.allocation_approve(actor=world.users["vision_admin"], allocation_id=ask(world, "vision_member", "seg", 12).pk)
    later = ask(world, "vision_member", "seg", 12, starts_in=datetime.timedelta(days=2))
    scheduled = services.allocation_approve(actor=world.users["vision_admin"], allocation_id=later.pk)
    assert scheduled.state == AllocationState.SCHEDULED
    assert allocations_start_due() == 0


def test_nobody_approves_their_own_request(world: World) -> None:
    own = ask(world, "nlp_admin", "llm", 1)
    with pytest.raises(FourEyes):
        services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=own.pk)


def test_gpus_that_a_sibling_borrowed_are_reclaimed_when_the_cluster_is_full(world: World) -> None:
    Quota.objects.all().delete()
    Quota.objects.create(department=world.acme, flavor=None, guaranteed=Decimal("0"), limit=Decimal("100"))
    Quota.objects.create(department=world.nlp, flavor=None, guaranteed=Decimal("8"), limit=Decimal("16"))
    Quota.objects.create(department=world.vision, flavor=None, guaranteed=Decimal("8"), limit=Decimal("16"))
    vision = world.users["vision_admin"]
    kept = services.allocation_approve(actor=vision, allocation_id=ask(world, "vision_member", "seg", 8).pk)
    small = services.allocation_approve(actor=vision, allocation_id=ask(world, "vision_member", "seg", 3).pk)
    large = services.allocation_approve(actor=vision, allocation_id=ask(world, "vision_member", "seg", 5).pk)
    request = ask(world, "nlp_member", "llm", 4)  # the 16 A100s are all booked; nlp is within its guarantee

    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=request.pk)

    giving = {row.pk: row.reclaim_units for row in Allocation.objects.filter(pk__in=[kept.pk, small.pk, large.pk])}
    assert giving == {kept.pk: None, small.pk: None, large.pk: 4}  # the 4 GPUs it needs, from the newest borrower
    event = AuditEvent.objects.get(action="allocation.approved", target_id=str(request.pk))
    assert [(item["allocation"], item["why"], item["units"]) for item in event.details["reclaimed"]] == [
        (large.pk, "borrowed", 4)
    ]


def test_a_preemptible_victim_is_reclaimed_at_once_and_the_request_provisions_now(world: World) -> None:
    _quotas(world)
    world.preemptible.preemptible = True
    world.preemptible.save()
    vision = world.users["vision_admin"]
    services.allocation_approve(actor=vision, allocation_id=ask(world, "vision_member", "seg", 8).pk)
    cheap = services.allocation_approve(
        actor=vision, allocation_id=ask(world, "vision_member", "seg", 4, priority=world.preemptible).pk
    )
    approved = services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=ask(world, "nlp_member", "llm", 3).pk)

    cheap.refresh_from_db()
    assert cheap.state == AllocationState.ACTIVE and cheap.quantity == 3  # one unit must go: it goes at once
    assert cheap.reservations.filter(released_at__isnull=True).count() == 3
    assert approved.state != AllocationState.SCHEDULED
    actions = list(AuditEvent.objects.filter(target_id=str(cheap.pk)).order_by("seq").values_list("action", flat=True))
    assert actions[-2:] == ["allocation.reclaiming", "allocation.reclaimed"]

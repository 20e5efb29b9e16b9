"""Kueue's documented preemption examples (its "Preemption" concept page), adapted to our tree and
run through the services: the cohort is the parent department (``acme``), a ClusterQueue is a child
department (``nlp``, ``vision``), its nominal quota is ``guaranteed``, its borrowing limit is
``limit - guaranteed`` and its lending limit is ``lending_limit``. Every grant is whole A100s (one
GPU-equivalent each); the standard class gives 15 minutes of notice, the preemptible one none (its
victims are reclaimed at once)."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, AllocationState, PreemptionPolicy, PriorityClass, Quota
from audit.models import AuditEvent
from kernel.errors import QuotaExceeded
from tenants.models import Department
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)

ADMIN = {"nlp_member": "nlp_admin", "vision_member": "vision_admin"}
PROJECT = {"nlp_member": "llm", "vision_member": "seg"}


def quotas(world: World, *, acme: int, nlp: tuple[int, int], vision: tuple[int, int],
           vision_lends: int | None = None) -> None:
    """GPU-equivalent quotas only: (guaranteed, limit) per department under ``acme``'s limit. The
    preemptible class is made preemptible (no notice), as Kueue's examples evict at once."""
    PriorityClass.objects.filter(pk=world.preemptible.pk).update(preemptible=True)
    Quota.objects.all().delete()
    rows: list[tuple[Department, int, int, int | None]] = [
        (world.acme, 0, acme, None), (world.nlp, *nlp, None), (world.vision, *vision, vision_lends)]
    for department, guaranteed, limit, lends in rows:
        Quota.objects.create(department=department, flavor=None, guaranteed=Decimal(guaranteed), limit=Decimal(limit),
                             lending_limit=None if lends is None else Decimal(lends))


def production(world: World) -> PriorityClass:
    return PriorityClass.objects.create(name="gpu-production", value=10000,
                                        preemption_policy=PreemptionPolicy.PREEMPT_LOWER_PRIORITY)


def request(world: World, persona: str, quantity: int, priority: PriorityClass | None = None) -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users[persona], project=getattr(world, PROJECT[persona]), flavor=world.a100, quantity=quantity,
        priority_class=priority or world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1),
        justification="kueue scenario",
    )


def granted(world: World, persona: str, quantity: int, priority: PriorityClass | None = None) -> Allocation:
    pending = request(world, persona, quantity, priority)
    return services.allocation_approve(actor=world.users[ADMIN[persona]], allocation_id=pending.pk)


def fates(*grants: Allocation) -> list[str]:
    """Each grant's state, "held" for a grant still granted (approved, provisioning or active:
    delivery runs eagerly in the tests)."""
    running = {AllocationState.APPROVED, AllocationState.PROVISIONING, AllocationState.ACTIVE}
    out = []
    for grant in grants:
        state = Allocation.objects.get(pk=grant.pk).state
        out.append("held" if state in running else str(state))
    return out


def reclaimed_for(grant: Allocation) -> int | None:
    return Allocation.objects.get(pk=grant.pk).reclaimed_for_id


def test_reclaim_within_cohort_takes_the_lowest_priority_then_the_newest_borrowing_grants(world: World) -> None:
    quotas(world, acme=12, nlp=(4, 12), vision=(8, 12))
    kept = granted(world, "vision_member", 8)
    old_preemptible = granted(world, "vision_member", 1, world.preemptible)
    old_standard = granted(world, "vision_member", 1)
    new_standard = granted(world, "vision_member", 1)
    new_preemptible = granted(world, "vision_member", 1, world.preemptible)
    pending = request(world, "nlp_member", 3)  # acme is full; nlp stays within its guarantee of 4

    approved = services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=pending.pk)

    event = AuditEvent.objects.get(action="allocation.approved", target_id=str(pending.pk))
    assert [victim["allocation"] for victim in event.details["reclaimed"]] == [
        new_preemptible.pk, old_preemptible.pk, new_standard.pk]
    assert {victim["why"] for victim in event.details["reclaimed"]} == {"borrowed"}
    assert fates(new_preemptible, old_preemptible, new_standard) == ["reclaimed", "reclaimed", "reclaiming"]
    assert {reclaimed_for(g) for g in (new_preemptible, old_preemptible, new_standard)} == {pending.pk}
    assert fates(kept, old_standard) == ["held", "held"]
    assert approved.state == AllocationState.SCHEDULED  # until the standard victim's notice runs out


def test_a_department_that_would_exceed_its_guarantee_cannot_reclaim_what_others_borrow(world: World) -> None:
    quotas(world, acme=12, nlp=(4, 12), vision=(8, 12))
    granted(world, "nlp_member", 2)
    granted(world, "vision_member", 8)
    borrowing = [granted(world, "vision_member", 1, world.preemptible) for _ in range(2)]
    beyond = request(world, "nlp_member", 3)  # 2 + 3 > 4: nlp would borrow too

    with pytest.raises(QuotaExceeded):
        services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=beyond.pk)

    assert fates(*borrowing, beyond) == ["held", "held", "pending"]
    assert AuditEvent.objects.filter(action="allocation.admission_denied", target_id=str(beyond.pk)).exists()
    within = request(world, "nlp_member", 2)  # 2 + 2 = 4: within, so it reclaims
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=within.pk)
    assert fates(*borrowing) == ["reclaimed", "reclaimed"]
    assert {reclaimed_for(grant) for grant in borrowing} == {within.pk}


def test_within_cluster_queue_lower_priority_preempts_only_strictly_lower_priority_grants(world: World) -> None:
    quotas(world, acme=16, nlp=(0, 4), vision=(0, 12))
    urgent = production(world)
    low = granted(world, "nlp_member", 2, world.preemptible)
    same = granted(world, "nlp_member", 2)
    elsewhere = granted(world, "vision_member", 2, world.preemptible)

    first = services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=request(world, "nlp_member", 2, urgent).pk)

    assert first.state == AllocationState.APPROVED  # its victim was preemptible: no notice to wait for
    assert fates(low, same, elsewhere) == ["reclaimed", "held", "held"]
    event = AuditEvent.objects.get(action="allocation.approved", target_id=str(first.pk))
    assert [(v["allocation"], v["why"]) for v in event.details["reclaimed"]] == [(low.pk, "lower-priority")]
    equal = request(world, "nlp_member", 1)  # standard preempts lower priority, but only standard and production remain
    with pytest.raises(QuotaExceeded):
        services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=equal.pk)
    assert fates(same, first, elsewhere, equal) == ["held", "held", "held", "pending"]


def test_a_lending_limit_keeps_part_of_an_idle_guarantee_from_borrowers(world: World) -> None:
    quotas(world, acme=16, nlp=(8, 16), vision=(8, 16), vision_lends=4)
    granted(world, "nlp_member", 8)
    granted(world, "nlp_member", 4)  # borrows the 4 that vision lends
    beyond = request(world, "nlp_member", 1)  # vision is idle and 4 A100s are free, but vision keeps 4

    with pytest.raises(QuotaExceeded) as refused:
        services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=beyond.pk)

    assert refused.value.details["department"] == "acme" and refused.value.details["in_use"] == "16"
    own = granted(world, "vision_member", 4)  # the kept part is there at once, nothing reclaimed
    assert own.state == AllocationState.APPROVED
    assert not Allocation.objects.filter(state__in=[AllocationState.RECLAIMING, AllocationState.RECLAIMED]).exists()


def test_without_a_lending_limit_the_same_idle_guarantee_is_lent(world: World) -> None:
    quotas(world, acme=16, nlp=(8, 16), vision=(8, 16))
    granted(world, "nlp_member", 8)
    granted(world, "nlp_member", 4)
    assert granted(world, "nlp_member", 1).state == AllocationState.APPROVED


def test_one_large_borrowing_grant_that_frees_enough_is_not_combined_with_smaller_ones(world: World) -> None:
    quotas(world, acme=13, nlp=(4, 12), vision=(8, 13))
    kept = granted(world, "vision_member", 8)
    large = granted(world, "vision_member", 4)  # wholly beyond vision's 8: borrows
    small = granted(world, "vision_member", 1, world.preemptible)  # borrows too, and goes first by priority
    pending = request(world, "nlp_member", 4)

    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=pending.pk)

    event = AuditEvent.objects.get(action="allocation.approved", target_id=str(pending.pk))
    assert [victim["allocation"] for victim in event.details["reclaimed"]] == [large.pk]
    assert fates(kept, large, small) == ["held", "reclaiming", "held"]

"""Admission on approve: quotas along the department chain, GPU-equivalents, oversubscription,
and cluster capacity; every refusal names the numbers and leaves nothing changed."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, AllocationState, Quota
from audit.models import AuditEvent
from kernel.errors import CapacityExceeded, QuotaExceeded
from tests.conftest import World, build_world

pytestmark = pytest.mark.django_db(transaction=True)


def ask(world: World, *, quantity: int, flavor: str = "a100", project: str = "llm", persona: str = "nlp_member",
        priority: str = "standard") -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users[persona], project=getattr(world, project), flavor=getattr(world, flavor),
        quantity=quantity, priority_class=getattr(world, priority), starts_at=start,
        ends_at=start + datetime.timedelta(days=1), justification="experiment",
    )


def approve(world: World, allocation: Allocation, persona: str = "nlp_admin") -> Allocation:
    return services.allocation_approve(actor=world.users[persona], allocation_id=allocation.pk)


def test_it_admits_up_to_the_flavor_limit_and_refuses_one_more_with_the_numbers(world: World) -> None:
    approve(world, ask(world, quantity=5))
    approve(world, ask(world, quantity=3))
    extra = ask(world, quantity=1)

    with pytest.raises(QuotaExceeded) as refusal:
        approve(world, extra)

    details = dict(refusal.value.details)
    # The binding step of the request's interval: the grants end a moment apart, so it is named.
    binding = (details.pop("from", None), details.pop("until", None))
    assert details == {
        "department": "nlp", "flavor": "a100", "requested": "1", "in_use": "8", "limit": "8", "effective_limit": "8",
    }
    extra.refresh_from_db()
    if binding != (None, None):
        assert extra.starts_at.isoformat() <= str(binding[0]) < str(binding[1]) <= extra.ends_at.isoformat()
    assert extra.state == AllocationState.PENDING
    denied = AuditEvent.objects.get(action="allocation.admission_denied", target_id=str(extra.pk))
    assert denied.outcome == "denied"
    assert denied.details["in_use"] == "8"


def test_it_counts_gpu_equivalents_across_flavors(world: World) -> None:
    # nlp: 10 GPU-equivalents in total; 8 A100 (8.0) + 14 MIG slices (14 × 0.1429 = 2.0006) would exceed it.
    approve(world, ask(world, quantity=8))
    with pytest.raises(QuotaExceeded) as refusal:
        approve(world, ask(world, quantity=14, flavor="mig"))
    assert refusal.value.details["flavor"] is None
    assert refusal.value.details["requested"] == "2.0006"
    approve(world, ask(world, quantity=13, flavor="mig"))


def test_it_applies_a_parents_quota_to_its_subtree(world: World) -> None:
    # The speech team has no quota of its own: nlp's quotas (and acme's) cover it.
    approve(world, ask(world, quantity=6))
    with pytest.raises(QuotaExceeded) as refusal:
        approve(world, ask(world, quantity=3, project="speech_project", persona="speech_member"))
    assert refusal.value.details["department"] == "nlp"


def test_it_enforces_the_organisation_total_over_departments(world: World) -> None:
    Quota.objects.filter(department=world.acme).update(limit=9)
    approve(world, ask(world, quantity=8))
    with pytest.raises(QuotaExceeded) as refusal:
        services.allocation_approve(
            actor=world.users["vision_admin"],
            allocation_id=ask(world, quantity=2, flavor="h100", project="seg", persona="vision_member").pk,
        )
    assert refusal.value.details["department"] == "acme"


def test_it_lets_a_preemptible_priority_class_oversubscribe_by_its_factor(world: World) -> None:
    Quota.objects.filter(department=world.nlp, flavor__isnull=True).update(limit=20)
    Quota.objects.filter(department=world.acme).update(limit=40)
    approve(world, ask(world, quantity=8))
    with pytest.raises(QuotaExceeded):
        approve(world, ask(world, quantity=1))
    approve(world, ask(world, quantity=4, priority="preemptible"))  # 12 ≤ 8 × 1.5
    with pytest.raises(QuotaExceeded) as refusal:
        approve(world, ask(world, quantity=1, priority="preemptible"))
    assert refusal.value.details["effective_limit"] == "12"


def test_it_refuses_a_flavor_without_any_quota(world: World) -> None:
    # vision has no quota for MIG slices; only the GPU-equivalent totals (vision's, acme's) cover it.
    covered = ask(world, quantity=1, flavor="mig", project="seg", persona="vision_member")
    services.allocation_approve(actor=world.users["vision_admin"], allocation_id=covered.pk)
    Quota.objects.filter(flavor__isnull=True).delete()
    lone = ask(world, quantity=1, flavor="mig", project="seg", persona="vision_member")
    with pytest.raises(QuotaExceeded) as refusal:
        services.allocation_approve(actor=world.users["vision_admin"], allocation_id=lone.pk)
    assert refusal.value.message == "Department vision has no quota for a100-1g or for GPU-equivalents."


@pytest.mark.django_db(transaction=True)
def test_it_refuses_when_the_cluster_has_no_free_capacity() -> None:
    world = build_world(a100_gpus=2)
    approve(world, ask(world, quantity=2))
    with pytest.raises(CapacityExceeded) as refusal:
        approve(world, ask(world, quantity=1))
    reason = "no node has 1 fully free NVIDIA-A100-SXM4-80GB GPU; the most is 0 on node a100-0"
    assert refusal.value.details == {
        "cluster": "test-cluster", "gpu_model": "NVIDIA-A100-SXM4-80GB", "requested": "1", "placed": "0",
        "kind": "whole-gpus", "reason": reason,
    }
    assert refusal.value.message == f"No room for 1 × a100 on cluster test-cluster: {reason}."


def test_it_frees_capacity_and_quota_when_an_allocation_is_released(world: World) -> None:
    held = approve(world, ask(world, quantity=8))
    waiting = ask(world, quantity=2)
    with pytest.raises(QuotaExceeded):
        approve(world, waiting)
    services.allocation_release(actor=world.users["nlp_member"], allocation_id=held.pk)
    approve(world, waiting)
    waiting.refresh_from_db()
    assert waiting.state == AllocationState.ACTIVE

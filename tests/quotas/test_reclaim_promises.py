"""What a reclaim under way promises, through the services on PostgreSQL (issue 31, defect 2): the
grant it makes room for is never taken by the next approval; a grant within its department's
guarantee is never taken for another department; every stated reason is true of the grants; and a
reclaim whose request is gone is called off instead of taking the grant for nothing."""

from __future__ import annotations

import pytest

from allocations.grants import services
from allocations.grants.reclaims import allocations_reclaim_due
from allocations.grants.scheduling import allocations_start_due
from allocations.models import Allocation, AllocationState, Quota
from audit.models import AuditEvent
from kernel.errors import QuotaExceeded
from tests.conftest import World, requires_postgres
from tests.quotas.reclaiming import after_notice, asked, decided, granted, production, quotas

pytestmark = [requires_postgres(), pytest.mark.django_db(transaction=True)]


def _states(*rows: Allocation) -> list[str]:
    for row in rows:
        row.refresh_from_db()
    return [row.state for row in rows]


def _nlp_reclaims_vision_whole(world: World) -> tuple[Allocation, Allocation, Allocation]:
    """The issue's story: acme's limit of 16 is full once nlp asks 4 more A100s within its guarantee
    of 8, so vision's borrowed grant of 2 A100s (both needed) is reclaimed with 15 minutes' notice."""
    quotas(world, acme="16", nlp=("8", "12"), vision=("8", "12"))
    kept = granted(world, "vision_member", 8, flavor=world.h100)
    granted(world, "nlp_member", 4)
    victim = granted(world, "vision_member", 2)  # borrowed: beyond vision's 8
    waiting = decided(world, asked(world, "nlp_member", 4))  # nlp 8 of its 8; acme 18 > 16: 2 must go
    assert _states(victim, waiting) == [AllocationState.RECLAIMING, AllocationState.SCHEDULED]
    assert victim.reclaimed_for_id == waiting.pk
    return kept, victim, waiting


def test_the_grant_a_reclaim_makes_room_for_is_not_taken_by_the_next_approval(world: World) -> None:
    _, victim, waiting = _nlp_reclaims_vision_whole(world)
    slice_request = asked(world, "vision_member", 1, flavor=world.mig)  # 37 s later, one MIG slice

    with pytest.raises(QuotaExceeded):
        decided(world, slice_request)

    assert _states(waiting, victim) == [AllocationState.SCHEDULED, AllocationState.RECLAIMING]
    assert not AuditEvent.objects.filter(action="allocation.reclaiming", target_id=str(waiting.pk)).exists()
    assert allocations_reclaim_due(now=after_notice()) == 1 and allocations_start_due(now=after_notice()) == 1
    assert _states(victim, waiting)[0] == AllocationState.RECLAIMED
    assert waiting.state in (AllocationState.APPROVED, AllocationState.PROVISIONING, AllocationState.ACTIVE)


def test_a_grant_within_its_departments_guarantee_is_not_taken_for_another_department(world: World) -> None:
    quotas(world, acme="12", nlp=("4", "12"), vision=("8", "12"))
    granted(world, "vision_member", 8)
    within = granted(world, "nlp_member", 4)  # nlp's whole guarantee
    Quota.objects.filter(department=world.acme).update(limit=10)  # acme now holds 12 against 10

    with pytest.raises(QuotaExceeded):
        decided(world, asked(world, "vision_member", 1))

    within.refresh_from_db()
    assert within.state == AllocationState.ACTIVE and within.reclaim_units is None and not within.reclaim_reason


def test_a_reason_says_oversubscription_only_of_a_grant_held_beyond_a_limit_by_its_factor(world: World) -> None:
    quotas(world, acme="32", nlp=("8", "12"), vision=("8", "12"))
    world.preemptible.preemptible = True
    world.preemptible.save()
    granted(world, "nlp_member", 10)
    cheap = granted(world, "nlp_member", 6, flavor=world.h100, priority=world.preemptible)  # 16 ≤ 12 × 1.5
    taker = decided(world, asked(world, "nlp_member", 2, priority=production()))  # nlp: 16 + 2 > 12

    event = AuditEvent.objects.get(action="allocation.reclaiming", target_id=str(cheap.pk))
    assert taker.state != AllocationState.SCHEDULED  # no notice: a preemptible class
    assert event.details["why"] == "oversubscribed" and event.details["units"] == 6
    assert "beyond the limit of department nlp, which held 16 GPU-equivalents against a limit of 12" in event.details["reason"]
    assert "through its priority class's oversubscription (gpu-preemptible may hold 1.5 times" in event.details["reason"]


def test_a_reclaim_whose_request_is_released_is_called_off_and_the_grant_keeps_running(world: World) -> None:
    _, victim, waiting = _nlp_reclaims_vision_whole(world)
    live_before = victim.reservations.filter(released_at__isnull=True).count()

    services.allocation_release(actor=world.users["nlp_member"], allocation_id=waiting.pk)
    assert allocations_reclaim_due(now=after_notice()) == 0  # nothing is taken for nothing

    victim.refresh_from_db()
    assert victim.state == AllocationState.ACTIVE and victim.reclaimed_for_id is None and victim.reclaim_deadline is None
    assert victim.reservations.filter(released_at__isnull=True).count() == live_before == 2
    event = AuditEvent.objects.get(action="allocation.reclaim_cancelled", target_id=str(victim.pk))
    assert event.details["for"] == waiting.pk and event.details["request_state"] == AllocationState.RELEASED
    assert event.before == {"state": AllocationState.RECLAIMING} and event.after == {"state": AllocationState.ACTIVE}

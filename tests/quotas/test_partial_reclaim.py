"""Partial reclaim, through the services on PostgreSQL (issue 31, item 7): a reclaim takes only the
units that must go, weighed by the victim's flavor (quota) or placed where the request needs them
(GPUs), with notice, audit, and the freed units' bookings released at the deadline; a whole grant
only when no part would do."""

from __future__ import annotations

import pytest

from allocations.grants import changes, services
from allocations.grants.reclaims import allocations_reclaim_due
from allocations.grants.scheduling import allocations_start_due
from allocations.models import Allocation, AllocationState, Quota
from audit.models import AuditEvent
from kernel.errors import TransitionNotAllowed
from notifications.models import Notification
from tests.conftest import World, build_world, requires_postgres
from tests.quotas.reclaiming import after_notice, asked, decided, granted, production, quotas

pytestmark = [requires_postgres(), pytest.mark.django_db(transaction=True)]


def _live_units(grant: Allocation) -> list[int]:
    return sorted(grant.reservations.filter(released_at__isnull=True).values_list("unit", flat=True))


def _event(action: str, grant: Allocation) -> AuditEvent:
    return AuditEvent.objects.get(action=action, target_id=str(grant.pk))


def test_a_one_gpu_production_request_takes_one_gpu_of_a_four_gpu_borrowed_grant(world: World) -> None:
    quotas(world, acme="12", nlp=("4", "10"), vision=("8", "12"))
    granted(world, "vision_member", 8)
    borrowed = granted(world, "vision_member", 4)  # acme full: 12 of 12
    request = asked(world, "nlp_member", 1, priority=production())

    approved = decided(world, request)

    borrowed.refresh_from_db()
    assert approved.state == AllocationState.SCHEDULED  # waits for the notice
    assert borrowed.state == AllocationState.ACTIVE and borrowed.quantity == 4
    assert borrowed.reclaim_units == 1 and borrowed.reclaimed_for_id == request.pk
    assert borrowed.reclaim_reason.startswith(f"1 of its 4 units reclaimed for request #{request.pk}")
    assert _live_units(borrowed) == [0, 1, 2, 3]  # still running until the deadline
    start = _event("allocation.reclaiming", borrowed)
    assert start.details["units"] == 1 and start.details["partial"] is True and start.details["why"] == "borrowed"
    approval = _event("allocation.approved", request)
    assert [(item["allocation"], item["units"]) for item in approval.details["reclaimed"]] == [(borrowed.pk, 1)]
    assert Notification.objects.filter(event="allocation.reclaim_notice", subject=f"allocation:{borrowed.pk}").exists()
    with pytest.raises(TransitionNotAllowed):  # its units are promised: no change until the deadline
        changes.allocation_resize(actor=world.users["vision_member"], allocation_id=borrowed.pk, quantity=2)
    assert allocations_start_due() == 0

    assert allocations_reclaim_due(now=after_notice()) == 1
    assert allocations_start_due(now=after_notice()) == 1
    borrowed.refresh_from_db()
    approved.refresh_from_db()
    assert borrowed.state == AllocationState.ACTIVE and borrowed.quantity == 3 and borrowed.reclaim_units is None
    assert _live_units(borrowed) == [0, 1, 2]
    assert borrowed.reservations.get(unit=3).release_reason == "reclaimed"
    end = _event("allocation.reclaimed", borrowed)
    assert end.details["released_units"] == [3] and end.details["for"] == request.pk
    assert end.before == {"quantity": 4} and end.after == {"quantity": 3}
    assert approved.state in (AllocationState.APPROVED, AllocationState.PROVISIONING, AllocationState.ACTIVE)


def test_mig_slices_go_as_many_as_the_quota_needs_by_their_weight(world: World) -> None:
    quotas(world, acme="9.5", nlp=("4", "10"), vision=("8", "12"))
    granted(world, "vision_member", 8)
    slices = granted(world, "vision_member", 7, flavor=world.mig)  # 7 × 0.1429: borrowed
    request = asked(world, "nlp_member", 1)  # acme: 9.0003 + 1 > 9.5, so 0.5003 must go: 4 slices

    decided(world, request)

    slices.refresh_from_db()
    assert slices.reclaim_units == 4 and slices.state == AllocationState.ACTIVE
    assert allocations_reclaim_due(now=after_notice()) == 1
    slices.refresh_from_db()
    assert slices.quantity == 3 and _live_units(slices) == [0, 1, 2]


def test_a_whole_gpu_for_room_frees_the_slices_of_one_gpu_and_no_more(db: None) -> None:
    world = build_world(a100_gpus=2)
    quotas(world, acme="100", nlp=("8", "16"), vision=("0", "16"))
    Quota.objects.create(department=world.nlp, flavor=world.mig, guaranteed=0, limit=14)
    slices = granted(world, "vision_member", 14, flavor=world.mig)  # both A100s carved into 1g.10gb slices
    gpus = {unit: (node, tuple(indices)) for unit, node, indices in
            slices.reservations.values_list("unit", "node_id", "gpu_indices")}
    request = asked(world, "nlp_member", 1)  # a whole A100: none is free

    decided(world, request)

    slices.refresh_from_db()
    assert slices.reclaim_units == 7  # one GPU's slices: its highest-numbered units
    freed = {gpus[unit] for unit in range(7, 14)}
    kept = {gpus[unit] for unit in range(7)}
    assert len(freed) == 1 and not freed & kept
    placed = request.reservations.get()
    assert (placed.node_id, tuple(placed.gpu_indices)) in freed


def test_a_whole_grant_is_reclaimed_when_no_part_would_do(world: World) -> None:
    quotas(world, acme="12", nlp=("4", "10"), vision=("8", "12"))
    granted(world, "vision_member", 8)
    borrowed = granted(world, "vision_member", 4)
    request = asked(world, "nlp_member", 4)  # acme: 12 + 4 > 12, all 4 must go

    decided(world, request)

    borrowed.refresh_from_db()
    assert borrowed.state == AllocationState.RECLAIMING and borrowed.reclaim_units is None
    assert borrowed.reclaim_reason.startswith(f"Reclaimed for request #{request.pk}")
    assert _event("allocation.reclaiming", borrowed).details["partial"] is False
    assert allocations_reclaim_due(now=after_notice()) == 1
    borrowed.refresh_from_db()
    assert borrowed.state == AllocationState.RECLAIMED and _live_units(borrowed) == []


def test_a_partial_reclaim_whose_request_is_released_is_called_off(world: World) -> None:
    quotas(world, acme="12", nlp=("4", "10"), vision=("8", "12"))
    granted(world, "vision_member", 8)
    borrowed = granted(world, "vision_member", 4)
    request = decided(world, asked(world, "nlp_member", 1))
    borrowed.refresh_from_db()
    assert borrowed.reclaim_units == 1

    services.allocation_release(actor=world.users["nlp_member"], allocation_id=request.pk)
    assert allocations_reclaim_due(now=after_notice()) == 0

    borrowed.refresh_from_db()
    assert borrowed.quantity == 4 and borrowed.reclaim_units is None and _live_units(borrowed) == [0, 1, 2, 3]
    assert _event("allocation.reclaim_cancelled", borrowed).details["partial"] is True

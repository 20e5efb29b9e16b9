"""Change requests: renewal and resize of a grant, through the API and the services.

Renewal within ``GPUPORTAL_SELF_RENEW_DAYS`` of the original end applies at once, after admission
over the added interval; beyond it the renewal waits for a department admin. Fewer units apply at
once; more units wait, and are placed next to the grant's own on approval. A change never takes
anything from another grant: it is refused instead.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from allocations.grants import changes, services
from allocations.models import Allocation, AllocationChange, AllocationState, ChangeState, Quota, Reservation
from audit.models import AuditEvent
from clusters.models import ClusterPush
from kernel.clock import clock_set
from kernel.errors import QuotaExceeded
from tests.conftest import World, build_world, requires_postgres
from tests.threads import all_at_once

DAY = datetime.timedelta(days=1)
POSTGRES: pytest.MarkDecorator = requires_postgres()


def granted(world: World, quantity: int = 1, *, starts_in: datetime.timedelta = datetime.timedelta(0),
            days: int = 7, persona: str = "nlp_member", project: str = "llm") -> Allocation:
    start = timezone.now() + starts_in
    allocation = services.allocation_request(
        actor=world.users[persona], project=getattr(world, project), flavor=world.a100, quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=days),
        justification="experiment",
    )
    admin = "vision_admin" if project == "seg" else "nlp_admin"
    return services.allocation_approve(actor=world.users[admin], allocation_id=allocation.pk)


def live(allocation: Allocation) -> dict[int, tuple[str, tuple[int, ...]]]:
    rows = Reservation.objects.filter(allocation=allocation, released_at__isnull=True).select_related("node")
    return {row.unit: (row.node.name, tuple(row.gpu_indices)) for row in rows}


def renew(world: World, persona: str, allocation: Allocation, ends_at: datetime.datetime) -> Any:
    return world.client(persona).post(
        f"/api/v1/allocations/{allocation.pk}/renew/", {"ends_at": ends_at.isoformat(), "justification": "more runs"},
        format="json",
    )


# ------------------------------------------------------------------------------------------ renewal


@pytest.mark.django_db
def test_a_renewal_within_the_window_applies_at_once(world: World) -> None:
    allocation = granted(world)
    later = allocation.ends_at + datetime.timedelta(days=14)

    response = renew(world, "nlp_member", allocation, later)

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["change"] is None and body["pending_change"] is None
    assert datetime.datetime.fromisoformat(body["ends_at"]) == later
    allocation.refresh_from_db()
    assert allocation.ends_at == later
    assert allocation.original_ends_at == later - datetime.timedelta(days=14)  # the window is measured from it
    assert AuditEvent.objects.filter(action="allocation.renewed", target_id=str(allocation.pk)).exists()
    assert not AllocationChange.objects.exists()


@pytest.mark.django_db
def test_a_renewal_beyond_the_window_waits_for_another_admin(world: World) -> None:
    allocation = granted(world)
    original = allocation.ends_at
    later = original + datetime.timedelta(days=14, minutes=1)

    asked = renew(world, "nlp_admin", allocation, later)

    assert asked.status_code == 202, asked.content
    change = asked.json()
    assert (change["kind"], change["state"], change["requested_by"]) == ("renew", "pending", "nlp_admin")
    allocation.refresh_from_db()
    assert allocation.ends_at == original  # the allocation keeps its terms until approval
    shown = world.client("nlp_member").get(f"/api/v1/allocations/{allocation.pk}/").json()
    assert shown["pending_change"] == {"id": change["id"], "kind": "renew"}
    assert AuditEvent.objects.filter(action="allocation.change_requested", target_id=str(allocation.pk)).exists()

    own = world.client("nlp_admin").post(f"/api/v1/allocation-changes/{change['id']}/approve/", {}, format="json")
    assert own.status_code == 403 and own.json()["error"]["code"] == "four_eyes"
    assert world.client("nlp_member").post(f"/api/v1/allocation-changes/{change['id']}/approve/", {}, format="json").status_code == 403

    approved = world.client("platform").post(
        f"/api/v1/allocation-changes/{change['id']}/approve/", {"comment": "fine"}, format="json"
    )

    assert approved.status_code == 200, approved.content
    decided = approved.json()
    assert (decided["state"], decided["requested_by"], decided["decided_by"]) == ("approved", "nlp_admin", "platform")
    allocation.refresh_from_db()
    assert allocation.ends_at == later
    event = AuditEvent.objects.get(action="allocation.change_approved", target_id=str(allocation.pk))
    assert event.details["requested_by"] == "nlp_admin" and event.actor_username == "platform"


@pytest.mark.django_db
def test_a_renewal_into_a_later_grant_on_the_same_gpus_is_refused_naming_it() -> None:
    world = build_world(a100_gpus=2)
    first = granted(world, 2, days=2)
    after = granted(world, 2, starts_in=datetime.timedelta(days=2, minutes=1), days=2)
    assert after.state == AllocationState.SCHEDULED
    assert sorted(live(first).values()) == sorted(live(after).values())  # the same two GPUs, one after the other
    ends_at = first.ends_at

    response = renew(world, "nlp_member", first, first.ends_at + DAY)

    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert error["code"] == "capacity_exceeded"
    assert error["details"]["conflicts"] == [after.pk] and f"#{after.pk}" in error["message"]
    first.refresh_from_db()
    assert first.ends_at == ends_at
    assert not AuditEvent.objects.filter(action="allocation.renewed", target_id=str(first.pk)).exists()


@pytest.mark.django_db
def test_a_renewal_is_refused_when_the_quota_is_full_over_the_added_interval(world: World) -> None:
    Quota.objects.filter(department=world.nlp, flavor=world.a100).update(limit=Decimal("6"))
    first = granted(world, 4, days=2)
    granted(world, 3, starts_in=datetime.timedelta(days=2, minutes=1), days=2)

    response = renew(world, "nlp_member", first, first.ends_at + DAY)

    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert (error["details"]["requested"], error["details"]["in_use"], error["details"]["limit"]) == ("4", "3", "6")
    assert error["details"]["department"] == "nlp" and error["details"]["flavor"] == "a100"


@pytest.mark.django_db
def test_a_renewal_whose_added_interval_is_free_succeeds_though_a_later_grant_exists_elsewhere() -> None:
    world = build_world(a100_gpus=4)
    first = granted(world, 2, days=2)
    # Starts before the first ends, so it is booked on the other two GPUs, and runs on past it.
    other = granted(world, 2, starts_in=datetime.timedelta(days=1), days=3)
    assert not set(live(first).values()) & set(live(other).values())
    later = first.ends_at + DAY

    response = renew(world, "nlp_member", first, later)

    assert response.status_code == 200, response.content
    first.refresh_from_db()
    assert first.ends_at == later
    assert live(first) and other.state == AllocationState.SCHEDULED


@pytest.mark.django_db
def test_a_renewal_keeps_its_mig_slice_beside_a_later_grant_on_another_slice_of_the_same_gpu() -> None:
    world = build_world(a100_gpus=1)
    start = timezone.now()
    slices = []
    for starts_in, days in ((datetime.timedelta(0), 2), (DAY, 3)):
        allocation = services.allocation_request(
            actor=world.users["nlp_member"], project=world.llm, flavor=world.mig, quantity=1,
            priority_class=world.standard, starts_at=start + starts_in, ends_at=start + starts_in + datetime.timedelta(days=days),
            justification="slices",
        )
        slices.append(services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk))
    first, other = slices
    placed = Reservation.objects.filter(released_at__isnull=True).values_list("allocation_id", "gpu_indices", "mig_start")
    assert {row[1][0] for row in placed} == {0} and len({row[2] for row in placed}) == 2  # one GPU, two slices

    response = renew(world, "nlp_member", first, first.ends_at + DAY)

    assert response.status_code == 200, response.content


@pytest.mark.django_db
def test_a_pending_request_just_gets_its_new_end(world: World) -> None:
    start = timezone.now()
    allocation = services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=1,
        priority_class=world.standard, starts_at=start, ends_at=start + DAY, justification="x",
    )
    outcome = changes.allocation_renew(actor=world.users["nlp_member"], allocation_id=allocation.pk,
                                       ends_at=start + datetime.timedelta(days=30))
    assert outcome.applied and outcome.change is None
    assert outcome.allocation.ends_at == start + datetime.timedelta(days=30)


# ------------------------------------------------------------------------------------------- resize


@pytest.mark.django_db
def test_fewer_units_apply_at_once_free_the_highest_units_and_push(world: World) -> None:
    allocation = granted(world, 3)
    booked = live(allocation)
    pushes = ClusterPush.objects.filter(project=world.llm).count()

    response = world.client("nlp_member").post(
        f"/api/v1/allocations/{allocation.pk}/resize/", {"quantity": 1}, format="json"
    )

    assert response.status_code == 200, response.content
    assert response.json()["quantity"] == 1 and response.json()["change"] is None
    assert live(allocation) == {0: booked[0]}
    released = Reservation.objects.filter(allocation=allocation, released_at__isnull=False)
    assert sorted(released.values_list("unit", "release_reason")) == [(1, "resized"), (2, "resized")]
    assert ClusterPush.objects.filter(project=world.llm).count() == pushes + 1
    event = AuditEvent.objects.get(action="allocation.resized", target_id=str(allocation.pk))
    assert event.before == {"quantity": 3} and event.after == {"quantity": 1}


@pytest.mark.django_db
def test_more_units_wait_then_only_the_added_units_are_placed(world: World) -> None:
    allocation = granted(world, 2)
    rows = {row.unit: row.pk for row in Reservation.objects.filter(allocation=allocation)}

    asked = world.client("nlp_member").post(f"/api/v1/allocations/{allocation.pk}/resize/", {"quantity": 4}, format="json")

    assert asked.status_code == 202, asked.content
    change = asked.json()
    assert (change["kind"], change["quantity"], change["ends_at"]) == ("resize", 4, None)
    allocation.refresh_from_db()
    assert allocation.quantity == 2 and len(live(allocation)) == 2
    approved = world.client("nlp_admin").post(f"/api/v1/allocation-changes/{change['id']}/approve/", {}, format="json")

    assert approved.status_code == 200, approved.content
    allocation.refresh_from_db()
    assert allocation.quantity == 4
    now_live = {row.unit: row.pk for row in Reservation.objects.filter(allocation=allocation, released_at__isnull=True)}
    assert sorted(now_live) == [0, 1, 2, 3]
    assert {unit: now_live[unit] for unit in (0, 1)} == rows  # the units it had stay where they were
    assert len(set(live(allocation).values())) == 4  # four distinct GPUs
    assert world.client("nlp_member").get(f"/api/v1/allocations/{allocation.pk}/").json()["pending_change"] is None


@pytest.mark.django_db
def test_no_units_are_added_to_a_grant_whose_end_has_come_before_its_expiry_ran(world: World) -> None:
    """Found by the simulator (seed 5): the tick was late, the grant's end had passed, and the
    approved raise was placed over an empty interval, next to nothing, on its own GPUs."""
    allocation = granted(world, 1, days=1)
    asked = world.client("nlp_member").post(f"/api/v1/allocations/{allocation.pk}/resize/", {"quantity": 2}, format="json")
    assert asked.status_code == 202, asked.content
    clock_set(allocation.ends_at + datetime.timedelta(minutes=5))  # no expiry has run: it is still granted

    approved = world.client("nlp_admin").post(f"/api/v1/allocation-changes/{asked.json()['id']}/approve/", {},
                                              format="json")
    again = world.client("nlp_member").post(f"/api/v1/allocations/{allocation.pk}/resize/", {"quantity": 3},
                                            format="json")

    assert approved.status_code == 409, approved.content
    assert "no units can be added" in approved.json()["error"]["message"]
    assert approved.json()["error"]["details"]["ends_at"] == allocation.ends_at.isoformat()
    allocation.refresh_from_db()
    assert allocation.quantity == 1 and len(live(allocation)) == 1
    assert again.status_code == 409, again.content


@pytest.mark.django_db
def test_a_raise_that_does_not_fit_the_quota_is_refused_on_approval_and_reclaims_nothing(world: World) -> None:
    Quota.objects.filter(department=world.nlp, flavor=world.a100).update(limit=Decimal("4"))
    allocation = granted(world, 2)
    granted(world, 2)
    outcome = changes.allocation_resize(actor=world.users["nlp_member"], allocation_id=allocation.pk, quantity=3)
    assert outcome.change is not None

    with pytest.raises(QuotaExceeded):
        changes.allocation_change_approve(actor=world.users["nlp_admin"], change_id=outcome.change.pk)

    outcome.change.refresh_from_db()
    allocation.refresh_from_db()
    assert outcome.change.state == ChangeState.PENDING and allocation.quantity == 2
    assert not Allocation.objects.filter(state=AllocationState.RECLAIMING).exists()
    assert AuditEvent.objects.filter(action="allocation.admission_denied", target_id=str(allocation.pk)).exists()


@pytest.mark.django_db
def test_a_change_is_rejected_with_a_comment_or_withdrawn_by_its_requester(world: World) -> None:
    allocation = granted(world, 1)
    first = changes.allocation_resize(actor=world.users["nlp_member"], allocation_id=allocation.pk, quantity=2).change
    assert first is not None
    url = f"/api/v1/allocation-changes/{first.pk}"
    assert world.client("nlp_member").post(f"/api/v1/allocations/{allocation.pk}/resize/", {"quantity": 3},
                                           format="json").status_code == 409  # one pending change at a time
    no_comment = world.client("nlp_admin").post(f"{url}/reject/", {}, format="json")
    assert no_comment.status_code == 400 and "comment" in no_comment.json()["error"]["fields"]
    rejected = world.client("nlp_admin").post(f"{url}/reject/", {"comment": "not now"}, format="json")
    assert rejected.status_code == 200 and rejected.json()["state"] == "rejected"
    assert world.client("nlp_member").post(f"{url}/cancel/", format="json").status_code == 409

    second = changes.allocation_resize(actor=world.users["nlp_member"], allocation_id=allocation.pk, quantity=2).change
    assert second is not None
    assert world.client("auditor").post(f"/api/v1/allocation-changes/{second.pk}/cancel/", format="json").status_code == 403
    withdrawn = world.client("nlp_member").post(f"/api/v1/allocation-changes/{second.pk}/cancel/", format="json")
    assert withdrawn.status_code == 200 and withdrawn.json()["state"] == "cancelled"
    listed = world.client("nlp_member").get("/api/v1/allocation-changes/", {"allocation": allocation.pk}).json()
    assert [item["state"] for item in listed["results"]] == ["cancelled", "rejected"]
    pending = world.client("nlp_member").get("/api/v1/allocation-changes/", {"state": "pending"}).json()
    assert pending["count"] == 0


# -------------------------------------------------------------------------------------------- reach


@pytest.mark.django_db
@pytest.mark.parametrize("persona", ["nobody", "vision_member", "vision_admin"])
def test_people_outside_the_department_cannot_tell_a_change_or_its_allocation_exists(world: World, persona: str) -> None:
    allocation = granted(world, 1)
    change = changes.allocation_resize(actor=world.users["nlp_member"], allocation_id=allocation.pk, quantity=2).change
    assert change is not None
    client = world.client(persona)
    later = (allocation.ends_at + DAY).isoformat()
    answers = [
        client.post(f"/api/v1/allocations/{allocation.pk}/renew/", {"ends_at": later}, format="json").status_code,
        client.post(f"/api/v1/allocations/{allocation.pk}/resize/", {"quantity": 1}, format="json").status_code,
        client.get(f"/api/v1/allocation-changes/{change.pk}/").status_code,
        client.post(f"/api/v1/allocation-changes/{change.pk}/approve/", {}, format="json").status_code,
        client.post(f"/api/v1/allocation-changes/{change.pk}/reject/", {"comment": "no"}, format="json").status_code,
        client.post(f"/api/v1/allocation-changes/{change.pk}/cancel/", format="json").status_code,
    ]
    assert answers == [404] * 6
    assert client.get("/api/v1/allocation-changes/").json()["count"] == 0
    change.refresh_from_db()
    allocation.refresh_from_db()
    assert change.state == ChangeState.PENDING and allocation.quantity == 1


# ----------------------------------------------------------------------------------------- PostgreSQL


@POSTGRES
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_approvals_of_raises_cannot_overcommit_the_quota(world: World) -> None:
    assert connection.vendor == "postgresql"
    Quota.objects.filter(department=world.nlp, flavor=world.a100).update(limit=Decimal("4"))
    raises = []
    for _ in range(2):
        allocation = granted(world, 1)
        change = changes.allocation_resize(actor=world.users["nlp_member"], allocation_id=allocation.pk, quantity=3).change
        assert change is not None
        raises.append(change.pk)

    def approval(change_id: int) -> Callable[[], str]:
        def job() -> str:
            try:
                changes.allocation_change_approve(actor=world.users["nlp_admin"], change_id=change_id)
            except QuotaExceeded:
                return "quota"
            return "approved"

        return job

    outcomes = all_at_once([approval(change_id) for change_id in raises])

    assert outcomes == Counter({"approved": 1, "quota": 1})
    held = Allocation.objects.filter(project=world.llm, state__in=[AllocationState.APPROVED, AllocationState.PROVISIONING,
                                                                    AllocationState.ACTIVE])
    assert sorted(held.values_list("quantity", flat=True)) == [1, 3]
    assert Reservation.objects.filter(allocation__in=held, released_at__isnull=True).count() == 4


def test_a_pending_change_is_withdrawn_when_its_grant_is_released(world: World) -> None:
    start = timezone.now()
    granted = services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=1,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="x",
    )
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=granted.pk)
    outcome = changes.allocation_resize(actor=world.users["nlp_member"], allocation_id=granted.pk, quantity=3)
    assert outcome.change is not None and not outcome.applied

    services.allocation_release(actor=world.users["nlp_member"], allocation_id=granted.pk)

    change = AllocationChange.objects.get(pk=outcome.change.pk)
    assert change.state == ChangeState.CANCELLED and "released" in change.decision_comment
    closed = AuditEvent.objects.get(action="allocation.change_cancelled", target_id=str(granted.pk))
    assert closed.details["changes"] == [change.pk]

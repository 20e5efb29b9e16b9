"""Four-eyes through the API: nobody decides their own request or their own change (403, code
``four_eyes``), platform admins included, unless ``GPUPORTAL_FOUR_EYES=false``; every decision
shows who requested and who decided."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.utils import timezone

from allocations.grants import changes, services
from allocations.models import Allocation, AllocationChange, AllocationState, ChangeState
from tests.conftest import World

pytestmark = pytest.mark.django_db


def requested(world: World, persona: str) -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users[persona], project=world.llm, flavor=world.a100, quantity=1, priority_class=world.standard,
        starts_at=start, ends_at=start + datetime.timedelta(days=2), justification="four eyes",
    )


def raised(world: World, persona: str) -> AllocationChange:
    """A raise of a grant (requested by nlp_member, approved by nlp_admin) that ``persona`` asked for."""
    allocation = services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=requested(world, "nlp_member").pk)
    change = changes.allocation_resize(actor=world.users[persona], allocation_id=allocation.pk, quantity=2).change
    assert change is not None
    return change


def post(world: World, persona: str, url: str, body: dict[str, Any]) -> Any:
    return world.client(persona).post(url, body, format="json")


@pytest.mark.parametrize("action", ["approve", "reject"])
@pytest.mark.parametrize("persona", ["nlp_admin", "platform"])
def test_nobody_decides_their_own_request(world: World, persona: str, action: str) -> None:
    own = requested(world, persona)

    response = post(world, persona, f"/api/v1/allocations/{own.pk}/{action}/", {"comment": "mine"})

    assert response.status_code == 403, response.content
    assert response.json()["error"]["code"] == "four_eyes"
    own.refresh_from_db()
    assert own.state == AllocationState.PENDING and own.decided_by is None


@pytest.mark.parametrize("action", ["approve", "reject"])
@pytest.mark.parametrize("persona", ["nlp_admin", "platform"])
def test_nobody_decides_their_own_change(world: World, persona: str, action: str) -> None:
    change = raised(world, persona)

    response = post(world, persona, f"/api/v1/allocation-changes/{change.pk}/{action}/", {"comment": "mine"})

    assert response.status_code == 403, response.content
    assert response.json()["error"]["code"] == "four_eyes"
    change.refresh_from_db()
    assert change.state == ChangeState.PENDING and change.decided_by is None


def test_the_requester_of_the_grant_may_still_decide_a_change_someone_else_asked_for(world: World) -> None:
    """Four-eyes is about the change: the grant's own requester is another pair of eyes for it."""
    allocation = services.allocation_approve(actor=world.users["platform"], allocation_id=requested(world, "nlp_admin").pk)
    change = changes.allocation_resize(actor=world.users["nlp_member"], allocation_id=allocation.pk, quantity=2).change
    assert change is not None

    response = post(world, "nlp_admin", f"/api/v1/allocation-changes/{change.pk}/approve/", {})

    assert response.status_code == 200, response.content


def test_another_admin_decides_and_both_names_are_shown(world: World) -> None:
    allocation = requested(world, "nlp_admin")
    decided = post(world, "platform", f"/api/v1/allocations/{allocation.pk}/approve/", {"comment": "ok"})
    assert decided.status_code == 200, decided.content
    assert (decided.json()["requested_by"], decided.json()["decided_by"]) == ("nlp_admin", "platform")

    change = changes.allocation_resize(actor=world.users["nlp_admin"], allocation_id=allocation.pk, quantity=2).change
    assert change is not None
    rejected = post(world, "platform", f"/api/v1/allocation-changes/{change.pk}/reject/", {"comment": "not now"})
    assert rejected.status_code == 200, rejected.content
    body = rejected.json()
    assert (body["requested_by"], body["decided_by"], body["decision_comment"]) == ("nlp_admin", "platform", "not now")
    assert body["decided_at"] is not None


def test_turning_four_eyes_off_lets_admins_decide_their_own(world: World, settings: Any) -> None:
    settings.GPUPORTAL_FOUR_EYES = False
    own = requested(world, "nlp_admin")
    approved = post(world, "nlp_admin", f"/api/v1/allocations/{own.pk}/approve/", {})
    assert approved.status_code == 200, approved.content
    assert approved.json()["requested_by"] == approved.json()["decided_by"] == "nlp_admin"

    change = raised(world, "platform")
    applied = post(world, "platform", f"/api/v1/allocation-changes/{change.pk}/approve/", {})
    assert applied.status_code == 200, applied.content
    assert applied.json()["state"] == "approved"


def test_four_eyes_off_still_needs_an_admin(world: World, settings: Any) -> None:
    settings.GPUPORTAL_FOUR_EYES = False
    change = raised(world, "nlp_member")

    response = post(world, "nlp_member", f"/api/v1/allocation-changes/{change.pk}/approve/", {})

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"

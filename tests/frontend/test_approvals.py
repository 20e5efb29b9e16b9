"""The approvals queue: one or several decisions at once, each checked by the services."""

from __future__ import annotations

import pytest

from allocations.models import AllocationState
from tests.conftest import World
from tests.frontend.conftest import Login, pending

pytestmark = pytest.mark.django_db


def test_it_lists_pending_requests_with_their_impact(world: World, login: Login) -> None:
    allocation = pending(world, quantity=3)
    pending(world, persona="vision_member", project="seg", flavor="h100")
    html = login("nlp_admin").get("/approvals/").content.decode()
    assert f"#{allocation.pk}" in html and "portal tests" in html
    assert "a100 units: 0 + 3 of 8" in html and "test-cluster: 16 free" in html
    assert "vision-seg" not in html  # another department's request


def test_it_approves_several_at_once(world: World, login: Login) -> None:
    first, second = pending(world), pending(world, quantity=2)
    response = login("nlp_admin").post(
        "/approvals/", {"selected": [first.pk, second.pk], "decision": "approve", "comment": "go"}, follow=True
    )
    html = response.content.decode()
    assert f"Approved #{first.pk}, #{second.pk}." in html and "No requests are waiting" in html
    for allocation in (first, second):
        allocation.refresh_from_db()
        assert allocation.state == AllocationState.APPROVED  # delivery to the cluster follows on commit
        assert allocation.decision_comment == "go" and allocation.decided_by == world.users["nlp_admin"]


def test_it_reports_each_refusal_on_its_own(world: World, login: Login) -> None:
    fits, too_big = pending(world, quantity=2), pending(world, quantity=7)
    response = login("nlp_admin").post(
        "/approvals/", {"selected": [fits.pk, too_big.pk], "decision": "approve"}, follow=True
    )
    html = response.content.decode()
    assert f"Approved #{fits.pk}." in html
    assert f"#{too_big.pk} not approved: Quota exceeded" in html
    too_big.refresh_from_db()
    assert too_big.state == AllocationState.PENDING


def test_it_rejects_only_with_a_comment(world: World, login: Login) -> None:
    allocation = pending(world)
    client = login("nlp_admin")
    response = client.post("/approvals/", {"selected": [allocation.pk], "decision": "reject", "comment": " "})
    assert response.status_code == 400
    assert "A rejection needs a comment" in response.content.decode()
    response = client.post("/approvals/", {"selected": [allocation.pk], "decision": "reject", "comment": "use MIG slices"},
                           follow=True)
    assert f"Rejected #{allocation.pk}." in response.content.decode()  # never "Rejectd"
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.REJECTED and allocation.decision_comment == "use MIG slices"


def test_it_asks_for_a_selection(world: World, login: Login) -> None:
    pending(world)
    response = login("nlp_admin").post("/approvals/", {"decision": "approve"})
    assert response.status_code == 400 and "Select at least one request." in response.content.decode()


def test_it_does_not_let_an_admin_decide_for_another_department(world: World, login: Login) -> None:
    allocation = pending(world)
    response = login("vision_admin").post("/approvals/", {"selected": [allocation.pk], "decision": "approve"})
    assert response.status_code == 400  # not among the choices: it is not in this admin's queue
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.PENDING


def test_it_shows_the_department_usage(world: World, login: Login) -> None:
    allocation = pending(world, quantity=3)
    login("nlp_admin").post("/approvals/", {"selected": [allocation.pk], "decision": "approve"})
    html = login("nlp_admin").get("/usage/").content.decode()
    assert "3 of 8 units in use" in html and 'aria-label="nlp a100: 37.5 % of the limit in use"' in html
    assert f'href="/allocations/{allocation.pk}/"' in html
    assert "<strong>vision</strong>" not in html and "<strong>nlp</strong>" in html

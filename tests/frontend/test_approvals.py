"""The approvals queue: one or several decisions at once, each checked by the services."""

from __future__ import annotations

import re

import pytest

from allocations.models import Allocation, AllocationState
from frontend.views.approvals import OUTLOOK_ROWS
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


def _quota_cell(html: str, allocation_id: int) -> str:
    """The text of the quota lines the queue shows for a request, tags stripped."""
    row = html.split(f'href="/allocations/{allocation_id}/">#{allocation_id}</a>', 1)[1].split("</tr>", 1)[0]
    cells = row.split("<td")
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", "<td" + cells[4])).strip()


def test_rows_beyond_the_first_load_the_same_decision_when_revealed(world: World, login: Login) -> None:
    requests = [pending(world) for _ in range(OUTLOOK_ROWS + 2)]  # all nlp's: the oldest first
    client = login("nlp_admin")
    html = client.get("/approvals/").content.decode()
    judged, later = requests[:OUTLOOK_ROWS], requests[OUTLOOK_ROWS:]
    for allocation in judged:
        assert f'hx-get="/approvals/{allocation.pk}/decision/"' not in html
        assert "a100 units: 0 + 1 of 8" in _quota_cell(html, allocation.pk)
    for allocation in later:
        assert f'hx-get="/approvals/{allocation.pk}/decision/" hx-trigger="revealed"' in html
        assert "a100 units" not in _quota_cell(html, allocation.pk)  # not judged on the page itself

    fragment = client.get(f"/approvals/{later[-1].pk}/decision/")
    assert fragment.status_code == 200
    body = fragment.content.decode()
    assert "✓ nlp · a100 units: 0 + 1 of 8" in body and "✓ acme · GPU-equivalents: 0 + 1 of 16" in body
    assert f'<div id="queue-outlook-{later[-1].pk}" hx-swap-oob="innerHTML">' in body
    assert "Approval would reclaim nothing" in body
    # A row the page judged itself reads exactly as its fragment does: one decision, one wording.
    first = client.get(f"/approvals/{judged[0].pk}/decision/").content.decode()
    lines = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", first.split("<div id=\"queue-outlook-", 1)[0])).strip()
    assert lines and lines == _quota_cell(html, judged[0].pk)


def test_a_lazy_row_says_a_refusal_as_the_decision_does(world: World, login: Login) -> None:
    requests = [pending(world) for _ in range(OUTLOOK_ROWS)]
    too_big = pending(world, quantity=7)
    Allocation.objects.filter(pk__in=[allocation.pk for allocation in requests]).update(state=AllocationState.ACTIVE)
    # The five made active hold five of nlp's eight a100 units: seven more do not fit.
    body = login("nlp_admin").get(f"/approvals/{too_big.pk}/decision/").content.decode()
    assert "✗ nlp · a100 units: 5 + 7 of 8" in body
    assert "As things stand, approval would be refused" in body


def test_a_row_decision_is_read_only_from_the_readers_queue(world: World, login: Login) -> None:
    allocation = pending(world)
    statuses = {persona: login(persona).get(f"/approvals/{allocation.pk}/decision/").status_code
                for persona in ("nlp_admin", "platform", "vision_admin", "nlp_member", "vision_member", "auditor",
                                "nobody")}
    assert statuses == {
        "nlp_admin": 200,  # the request's department's admin: it is in their queue
        "platform": 200,  # platform admins decide for every department
        "vision_admin": 404,  # another department's admin: not in their queue, not even said to exist
        "nlp_member": 404,  # a member of the department decides nothing
        "vision_member": 404,
        "auditor": 404,
        "nobody": 404,
    }


def test_a_row_decision_needs_a_login_and_a_pending_request(world: World, login: Login) -> None:
    allocation = pending(world)
    anonymous = login(None).get(f"/approvals/{allocation.pk}/decision/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    login("nlp_admin").post("/approvals/", {"selected": [allocation.pk], "decision": "approve"})
    assert login("nlp_admin").get(f"/approvals/{allocation.pk}/decision/").status_code == 404  # decided
    assert login("nlp_admin").get("/approvals/999999/decision/").status_code == 404

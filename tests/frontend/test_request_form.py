"""The request form: field errors in place, service refusals on the right field, live feedback."""

from __future__ import annotations

import datetime
import re
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from allocations.booking.reservations import reservations_where
from allocations.grants import services
from allocations.models import Allocation, AllocationState, Flavor, SharingMode
from frontend import feedback as feedback_module
from frontend.feedback import request_feedback
from tests.conftest import World
from tests.frontend.conftest import Login, pending

pytestmark = pytest.mark.django_db


def valid(world: World, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "project": world.llm.pk, "flavor": world.a100.pk, "quantity": 2, "priority_class": world.standard.pk,
        "cluster": "", "starts_at": "", "duration_days": 7, "justification": "fine-tuning",
    }
    data.update(changes)
    return data


def field_errors(html: str, name: str) -> str:
    match = re.search(rf'<div class="field-errors" id="id_{name}_error"[^>]*>(.*?)</div>', html, re.S)
    assert match is not None, name
    return re.sub(r"<[^>]+>", " ", match.group(1)).strip()


def test_it_submits_a_request_and_shows_it(world: World, login: Login) -> None:
    response = login("nlp_member").post("/allocations/new/", valid(world), follow=True)
    allocation = Allocation.objects.get()
    assert allocation.state == AllocationState.PENDING and allocation.quantity == 2
    assert allocation.requested_by == world.users["nlp_member"]
    assert response.redirect_chain[-1][0] == f"/allocations/{allocation.pk}/"
    html = response.content.decode()
    assert f"Request #{allocation.pk} submitted" in html
    assert "An allocation was requested" in html  # the timeline, from the audit log


def test_it_shows_field_errors_in_place(world: World, login: Login) -> None:
    data = valid(world, quantity=0, justification="", duration_days=500)
    response = login("nlp_member").post("/allocations/new/", data)
    assert response.status_code == 400
    html = response.content.decode()
    assert "greater than or equal to 1" in field_errors(html, "quantity")
    assert "required" in field_errors(html, "justification")
    assert "less than or equal to 90" in field_errors(html, "duration_days")
    assert field_errors(html, "project") == ""
    assert re.search(r'<input[^>]*aria-invalid="true"[^>]*id="id_quantity"|<input[^>]*id="id_quantity"[^>]*aria-invalid="true"',
                     html)
    assert 'aria-describedby="id_quantity_helptext id_quantity_error"' in html
    assert not Allocation.objects.exists()


def test_it_puts_a_service_refusal_on_its_field(world: World, login: Login) -> None:
    response = login("nlp_member").post("/allocations/new/", valid(world, starts_at="2001-01-01T00:00"))
    assert response.status_code == 400
    assert "may not be in the past" in field_errors(response.content.decode(), "starts_at")


def test_it_offers_only_the_projects_one_may_request_for(world: World, login: Login) -> None:
    html = login("nlp_member").get("/allocations/new/").content.decode()
    assert "nlp-llm" in html and "vision-seg" not in html and "speech-asr" not in html
    response = login("nlp_member").post("/allocations/new/", valid(world, project=world.seg.pk))
    assert response.status_code == 400
    assert "valid choice" in field_errors(response.content.decode(), "project")


def test_it_tells_someone_without_a_project(world: World, login: Login) -> None:
    html = login("auditor").get("/allocations/new/").content.decode()
    assert "No project to request for" in html and "<form method=\"post\" action=\"/allocations/new/\"" not in html


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace(" :", ":")


def where_line(html: str) -> str:
    match = re.search(r"<strong>Where:</strong> (.*?) <span", html)
    assert match is not None, "no Where line"
    return match.group(1)


def test_it_gives_live_feedback_on_quota_and_fit(world: World, login: Login) -> None:
    pending(world)  # pending requests hold nothing
    params = {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": 3, "priority_class": world.standard.pk,
              "duration_days": 7}  # the quota is judged over the request's dates, as approval judges it
    response = login("nlp_member").get("/allocations/new/feedback/", params)
    assert response.status_code == 200
    html = response.content.decode()
    assert re.search(r'id="feedback-gpu-eq">3 ', html)
    assert "a100 units: 8 of 8 left, 5 after this request" in text_of(html)
    # The engine's dry run: all 16 whole A100s of the mixed MIG nodes could take a unit now.
    assert "✓ Fits on cluster test-cluster: 16 units of a100 free now" in text_of(html)
    assert "This request fits today." in html
    assert "<html" not in html  # a fragment


@pytest.mark.parametrize(("quantity", "verdict"), [
    (2, "This request fits today."),
    (9, "As things stand, approval would be refused."),
])
def test_the_feedback_says_its_verdict_first(world: World, login: Login, quantity: int, verdict: str) -> None:
    """The verdict comes right under the panel's title, before the sharing explainer and the
    numbers: on a phone those run a screen long."""
    params = {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": quantity,
              "priority_class": world.standard.pk, "duration_days": 7}
    html = login("nlp_member").get("/allocations/new/feedback/", params).content.decode()
    order = [html.index(marker) for marker in ('id="feedback-title"', 'id="feedback-verdict"', 'id="feedback-sharing"',
                                               'id="feedback-gpu-eq"', 'id="feedback-outlook"')]
    assert order == sorted(order)
    assert verdict in text_of(html.split('id="feedback-verdict"', 1)[1].split("</p>", 1)[0])


def test_it_names_the_node_and_gpus_the_engine_would_choose(world: World, login: Login) -> None:
    params = {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": 3, "priority_class": world.standard.pk}
    where = where_line(login("nlp_member").get("/allocations/new/feedback/", params).content.decode())
    match = re.fullmatch(r"cluster test-cluster: (.*)", where)
    assert match is not None, where
    gpus = [
        (node, gpu) for part in match.group(1).split("; ")
        for node, _, listed in [part.partition(" ")] for gpu in listed.split(", ")
    ]
    assert len(set(gpus)) == 3 and all(re.fullmatch(r"a100-[01]", node) and re.fullmatch(r"gpu[0-7]", gpu)
                                       for node, gpu in gpus), where
    params["flavor"] = world.mig.pk  # a MIG instance is named with its first memory slice: gpu2@4
    where = where_line(login("nlp_member").get("/allocations/new/feedback/", params).content.decode())
    assert re.fullmatch(r"cluster test-cluster: a100-[01] gpu[0-7]@[0-7](, gpu[0-7]@[0-7])*(; .*)?", where), where


def test_it_shows_where_approval_books_the_units_when_nothing_changes(world: World) -> None:
    busy = pending(world, flavor="mig", quantity=2)
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=busy.pk)
    allocation = pending(world, flavor="mig", quantity=4)
    feedback = request_feedback(project=world.llm, flavor=world.mig, quantity=4,
                                cluster=None)
    line = feedback.clusters[0]
    assert line.fits and line.placed == 4 and line.reason == ""
    approved = services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    assert reservations_where(allocation=approved) == line.where  # the same engine, policy and workload
    assert feedback.where == [f"cluster test-cluster: {line.where_label}"]


def test_it_says_when_a_request_cannot_fit(world: World, login: Login) -> None:
    params = {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": 9, "priority_class": world.standard.pk,
              "duration_days": 7}
    html = login("nlp_member").get("/allocations/new/feedback/", params).content.decode()
    assert "✗ exceeds" in html and "approval would be refused" in html
    l4 = Flavor.objects.create(
        name="l4", display_name="L4", gpu_model="NVIDIA-L4", sharing_mode=SharingMode.EXCLUSIVE,
        resource_name="nvidia.com/gpu", memory_mib=24576, compute_percent=100, gpu_equivalents=Decimal("1"),
    )
    params = {"project": world.llm.pk, "flavor": l4.pk, "quantity": 1, "priority_class": world.standard.pk}
    html = login("nlp_member").get("/allocations/new/feedback/", params).content.decode()
    assert "No active cluster has NVIDIA-L4 GPUs" in html


def test_it_gives_the_engines_reason_when_a_request_is_too_large(world: World, login: Login) -> None:
    params = {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": 17, "priority_class": world.standard.pk,
              "duration_days": 7}
    html = login("nlp_member").get("/allocations/new/feedback/", params).content.decode()
    assert re.search(
        r"✗ Does not fit on cluster test-cluster: no node has 1 fully free NVIDIA-A100-SXM4-80GB GPU; "
        r"the most is 0 on node a100-[01] \(16 of 17 units would fit\)",
        text_of(html),
    ), text_of(html)
    assert "<strong>Where:</strong>" not in html and "approval would be refused" in html
    # No node runs MPS with four replicas: the engine says no node offers the flavor at all.
    params = {"project": world.llm.pk, "flavor": world.mps.pk, "quantity": 1, "priority_class": world.standard.pk}
    assert ("✗ Does not fit on cluster test-cluster: no schedulable node of cluster test-cluster offers "
            "NVIDIA-H100-80GB-HBM3 mps replicas (4 per GPU)") in text_of(
        login("nlp_member").get("/allocations/new/feedback/", params).content.decode()
    )


def test_it_counts_free_units_up_to_a_limit(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(feedback_module, "FREE_COUNT_LIMIT", 200)
    line = request_feedback(project=None, flavor=world.mig, quantity=2, cluster=None).clusters[0]
    assert (line.free, line.free_label) == (112, "112")  # 16 A100s × seven 1g.10gb instances
    monkeypatch.setattr(feedback_module, "FREE_COUNT_LIMIT", 10)
    line = request_feedback(project=None, flavor=world.mig, quantity=2, cluster=None).clusters[0]
    assert (line.fits, line.free, line.free_label) == (True, 10, "10+")


def test_it_warns_that_approval_first_books_allocations_granted_before_placement(world: World, login: Login) -> None:
    start = timezone.now()
    Allocation.objects.create(
        project=world.seg, flavor=world.a100, quantity=2, priority_class=world.standard, cluster=world.cluster,
        starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="legacy",
        requested_by=world.users["vision_member"], state=AllocationState.ACTIVE,
    )
    params = {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": 1, "priority_class": world.standard.pk}
    html = login("nlp_member").get("/allocations/new/feedback/", params).content.decode()
    assert ("1 allocation granted before GPU placement is not booked on GPUs yet; approval books it first, "
            "which can take room counted free here.") in text_of(html)


def test_it_reports_errors_live_only_for_fields_filled_in(world: World, login: Login) -> None:
    params: dict[str, str | int] = {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": "abc", "justification": ""}
    html = login("nlp_member").get("/allocations/new/feedback/", params).content.decode()
    assert 'id="id_quantity_error" hx-swap-oob="true"><p>Enter a whole number.</p>' in html
    assert 'id="id_justification_error" hx-swap-oob="true"></div>' in html
    assert "Choose a flavor and a quantity" in html


def test_it_keeps_the_csrf_token_out_of_the_feedback_url(world: World, login: Login) -> None:
    html = login("nlp_member").get("/allocations/new/").content.decode()
    assert 'hx-params="not csrfmiddlewaretoken"' in html and 'hx-get="/allocations/new/feedback/"' in html


def _line(allocation_id: int, *, own: bool) -> Any:
    from frontend.outlook import ReclaimLine

    return ReclaimLine(allocation_id=allocation_id, project="nlp-llm", department="nlp", flavor="a100", quantity=1,
                       priority_class="gpu-preemptible", state="active", why="lower-priority", notice_minutes=0,
                       readable=True, other_department=False, own=own)


def test_the_reclaim_confirmation_speaks_of_ones_own_grants_as_ones_own() -> None:
    from frontend.outlook import AdmissionOutlook

    mine = AdmissionOutlook(admitted=True, reclaim=[_line(1, own=True), _line(2, own=True)])
    assert mine.confirmation_label == "I understand that approving this request would take my own grants listed."
    assert "people who hold them" not in mine.confirmation_label
    theirs = AdmissionOutlook(admitted=True, reclaim=[_line(1, own=False)])
    assert "from the people who hold them" in theirs.confirmation_label
    both = AdmissionOutlook(admitted=True, reclaim=[_line(1, own=True), _line(2, own=False)])
    assert "mine, and others'" in both.confirmation_label

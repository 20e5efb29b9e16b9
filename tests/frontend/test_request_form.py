"""The request form: field errors in place, service refusals on the right field, live feedback."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest

from allocations.models import Allocation, AllocationState, Flavor, SharingMode
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


def test_it_gives_live_feedback_on_quota_and_fit(world: World, login: Login) -> None:
    pending(world)  # pending requests hold nothing
    params = {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": 3, "priority_class": world.standard.pk}
    response = login("nlp_member").get("/allocations/new/feedback/", params)
    assert response.status_code == 200
    html = response.content.decode()
    assert re.search(r'id="feedback-gpu-eq">3 ', html)
    assert "a100 units: 8 of 8 left, 5 after this request" in re.sub(r"<[^>]+>|\s+", " ", html).replace("  ", " ")
    assert "cluster <strong>test-cluster</strong>" in html and "16 of 16" in html
    assert "This request fits today." in html
    assert "<html" not in html  # a fragment


def test_it_says_when_a_request_cannot_fit(world: World, login: Login) -> None:
    params = {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": 9, "priority_class": world.standard.pk}
    html = login("nlp_member").get("/allocations/new/feedback/", params).content.decode()
    assert "✗ exceeds" in html and "approval would be refused" in html
    l4 = Flavor.objects.create(
        name="l4", display_name="L4", gpu_model="NVIDIA-L4", sharing_mode=SharingMode.EXCLUSIVE,
        resource_name="nvidia.com/gpu", memory_mib=24576, compute_percent=100, gpu_equivalents=Decimal("1"),
    )
    params = {"project": world.llm.pk, "flavor": l4.pk, "quantity": 1, "priority_class": world.standard.pk}
    html = login("nlp_member").get("/allocations/new/feedback/", params).content.decode()
    assert "No active cluster has NVIDIA-L4 GPUs" in html


def test_it_reports_errors_live_only_for_fields_filled_in(world: World, login: Login) -> None:
    params: dict[str, str | int] = {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": "abc", "justification": ""}
    html = login("nlp_member").get("/allocations/new/feedback/", params).content.decode()
    assert 'id="id_quantity_error" hx-swap-oob="true"><p>Enter a whole number.</p>' in html
    assert 'id="id_justification_error" hx-swap-oob="true"></div>' in html
    assert "Choose a flavor and a quantity" in html


def test_it_keeps_the_csrf_token_out_of_the_feedback_url(world: World, login: Login) -> None:
    html = login("nlp_member").get("/allocations/new/").content.decode()
    assert 'hx-params="not csrfmiddlewaretoken"' in html and 'hx-get="/allocations/new/feedback/"' in html

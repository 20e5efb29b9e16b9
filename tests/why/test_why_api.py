"""The why and simulate endpoints over HTTP: who sees what, simulate writes nothing and answers as
why does for the same request, and the query count does not grow with the pending requests."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocations.models import Allocation
from audit.models import AuditEvent
from tests.conftest import World
from tests.why.test_reasons import _vision_holds_ten, ask, grant

pytestmark = pytest.mark.django_db


def body(world: World, quantity: int) -> dict[str, Any]:
    start = timezone.now()
    return {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": quantity,
            "priority_class": world.standard.pk, "starts_at": start.isoformat(),
            "ends_at": (start + datetime.timedelta(days=1)).isoformat(), "justification": "simulate"}


def test_a_member_sees_why_her_request_waits_and_an_outsider_gets_404(world: World) -> None:
    _vision_holds_ten(world)
    request = ask(world, flavor=world.a100, quantity=7)
    answer = world.client("nlp_member").get(f"/api/v1/allocations/{request.pk}/why/")
    assert answer.status_code == 200, answer.content
    data = answer.json()
    assert data["reason"]["code"] == "quota" and data["reason"]["facts"]["department"] == "acme"
    assert data["estimate"]["starts_at"] is not None and data["queue"] == {"position": 1, "of": 1, "ahead": 0}
    assert any(offer["kind"] == "fewer-units" and offer["quantity"] == 6 for offer in data["alternatives"])
    assert world.client("vision_member").get(f"/api/v1/allocations/{request.pk}/why/").status_code == 404
    assert world.client(None).get(f"/api/v1/allocations/{request.pk}/why/").status_code == 401


def test_a_running_grant_is_not_waiting(world: World) -> None:
    approved = grant(world, ask(world, flavor=world.a100), "nlp_admin")
    Allocation.objects.filter(pk=approved.pk).update(state="active")
    response = world.client("nlp_member").get(f"/api/v1/allocations/{approved.pk}/why/")
    assert response.status_code == 409 and response.json()["error"]["details"]["state"] == "active"


def timeless(facts: dict[str, Any]) -> dict[str, Any]:
    """Without the bounds of the interval (the two requests start a few milliseconds apart)."""
    return {key: value for key, value in facts.items() if key not in ("from", "until", "binding_from", "binding_until")}


def test_simulate_writes_nothing_and_answers_as_why_does(world: World) -> None:
    _vision_holds_ten(world)
    rows, events = Allocation.objects.count(), AuditEvent.objects.count()
    simulated = world.client("nlp_member").post("/api/v1/allocations/simulate/", body(world, 7), format="json")
    assert simulated.status_code == 200, simulated.content
    assert (Allocation.objects.count(), AuditEvent.objects.count()) == (rows, events)
    made = ask(world, flavor=world.a100, quantity=7)
    asked = world.client("nlp_member").get(f"/api/v1/allocations/{made.pk}/why/").json()
    first = simulated.json()
    assert first["allocation"] is None and first["reason"]["code"] == asked["reason"]["code"]
    assert timeless(first["reason"]["facts"]) == timeless(asked["reason"]["facts"])
    assert [timeless(line) for line in first["quota"]] == [timeless(line) for line in asked["quota"]]
    assert first["estimate"]["starts_at"] == asked["estimate"]["starts_at"]
    assert [offer["kind"] for offer in first["alternatives"]] == [offer["kind"] for offer in asked["alternatives"]]


def test_simulate_names_a_bad_field(world: World) -> None:
    response = world.client("nlp_member").post("/api/v1/allocations/simulate/", {**body(world, 0)}, format="json")
    assert response.status_code == 400 and "quantity" in str(response.json())


def _queries(world: World, allocation: Allocation) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert world.client("nlp_member").get(f"/api/v1/allocations/{allocation.pk}/why/").status_code == 200
    return len(captured.captured_queries)


def test_why_runs_as_many_queries_with_many_pending_requests_as_with_few(world: World) -> None:
    _vision_holds_ten(world)
    request = ask(world, flavor=world.a100, quantity=7)
    few = _queries(world, request)
    for _ in range(12):
        ask(world, flavor=world.a100, quantity=7, persona="speech_member", project="speech_project")
        ask(world, flavor=world.h100, persona="vision_member", project="seg")
    assert _queries(world, request) == few

"""Project caps: a department admin's ceiling on one project's share of the department's quota,
honoured at approval (409 naming the project cap), by renewals and raises, and audited."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from allocations.grants import changes, services
from allocations.models import Allocation, AllocationState, ProjectQuota
from audit.models import AuditEvent
from kernel.errors import QuotaExceeded
from tests.conftest import World

pytestmark = pytest.mark.django_db


def _caps(world: World, persona: str, caps: list[dict[str, Any]]) -> Any:
    return world.client(persona).put(f"/api/v1/projects/{world.llm.pk}/quotas/", {"caps": caps}, format="json")


def _request(world: World, quantity: int, *, days: int = 2) -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=days),
        justification="caps",
    )


def _approve(world: World, allocation: Allocation) -> Any:
    return world.client("nlp_admin").post(f"/api/v1/allocations/{allocation.pk}/approve/", {}, format="json")


def test_a_request_over_the_project_cap_is_refused_with_409_naming_the_cap_and_one_within_passes(world: World) -> None:
    assert _caps(world, "nlp_admin", [{"flavor": world.a100.pk, "limit": "3"}]).status_code == 200
    first = _request(world, 2)
    assert _approve(world, first).status_code == 200  # 2 ≤ 3 (the department's own limit is 8)
    second = _request(world, 2)
    refused = _approve(world, second)
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert "Project cap exceeded for a100 units in project nlp-llm" in error["message"]
    assert {k: error["details"][k] for k in ("project", "cap", "requested", "in_use", "limit")} == {
        "project": "nlp-llm", "cap": "project", "requested": "2", "in_use": "2", "limit": "3"}
    assert Allocation.objects.get(pk=second.pk).state == AllocationState.PENDING
    third = _request(world, 1)
    assert _approve(world, third).status_code == 200  # 2 + 1 ≤ 3


def test_the_gpu_equivalent_cap_counts_every_flavor_of_the_project(world: World) -> None:
    _caps(world, "nlp_admin", [{"flavor": None, "limit": "1.5"}])
    assert _approve(world, _request(world, 1)).status_code == 200
    refused = _approve(world, _request(world, 1))
    assert refused.status_code == 409 and refused.json()["error"]["details"]["flavor"] is None


def test_caps_do_not_apply_to_other_projects_and_removing_them_lifts_the_refusal(world: World) -> None:
    _caps(world, "nlp_admin", [{"flavor": world.a100.pk, "limit": "0"}])
    held = _request(world, 1)
    assert _approve(world, held).status_code == 409
    start = timezone.now()
    other = services.allocation_request(
        actor=world.users["speech_member"], project=world.speech_project, flavor=world.a100, quantity=1,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=2), justification="x")
    assert _approve(world, other).status_code == 200
    assert _caps(world, "nlp_admin", []).status_code == 200
    assert not ProjectQuota.objects.filter(project=world.llm).exists()
    assert _approve(world, held).status_code == 200


def test_renewals_and_raises_honour_the_cap(world: World) -> None:
    granted = services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=_request(world, 2).pk)
    _caps(world, "nlp_admin", [{"flavor": world.a100.pk, "limit": "2"}])
    raised = world.client("nlp_member").post(f"/api/v1/allocations/{granted.pk}/resize/",
                                             {"quantity": 3, "justification": "more"}, format="json")
    assert raised.status_code == 202  # a raise waits for a decision: admission at the decision refuses it
    change = granted.changes.get(state="pending")
    with pytest.raises(QuotaExceeded, match="Project cap exceeded for a100 units in project nlp-llm"):
        changes.allocation_change_approve(actor=world.users["nlp_admin"], change_id=change.pk)
    # A renewal of the grant alone stays within the cap (its own holding is left out).
    renewed = world.client("nlp_member").post(
        f"/api/v1/allocations/{granted.pk}/renew/",
        {"ends_at": (granted.ends_at + datetime.timedelta(days=1)).isoformat(), "justification": "more time"},
        format="json")
    assert renewed.status_code == 200, renewed.content


def test_caps_are_read_by_members_set_by_admins_and_audited(world: World) -> None:
    body: list[dict[str, Any]] = [{"flavor": world.a100.pk, "limit": "4"}, {"flavor": None, "limit": "6.5"}]
    assert _caps(world, "nlp_member", body).status_code == 403
    assert _caps(world, "vision_admin", body).status_code == 404
    assert _caps(world, "nlp_admin", [*body, {"flavor": world.a100.pk, "limit": "1"}]).status_code == 400
    answer = _caps(world, "nlp_admin", body)
    assert answer.status_code == 200
    assert {(c["flavor"], c["limit"], c["in_use"]) for c in answer.json()["caps"]} == {
        ("a100", "4.0000", "0.0000"), (None, "6.5000", "0.0000")}
    read = world.client("nlp_member").get(f"/api/v1/projects/{world.llm.pk}/quotas/").json()
    assert read == answer.json()
    [event] = AuditEvent.objects.filter(action="project.quota_set")
    assert event.before == {"caps": {}} and event.after == {"caps": {"a100": "4", "gpu-equivalents": "6.5"}}
    _caps(world, "nlp_admin", body)  # the same caps again: nothing changes, nothing recorded
    assert AuditEvent.objects.filter(action="project.quota_set").count() == 1
    assert ProjectQuota.objects.get(project=world.llm, flavor=world.a100).limit == Decimal(4)


def test_the_django_admin_lists_caps_read_only(world: World, client: Any) -> None:
    ProjectQuota.objects.create(project=world.llm, flavor=world.a100, limit=Decimal(2))
    client.force_login(User.objects.create_superuser("ops", "ops@example.org", "pw-ops"))
    listed = client.get("/admin/allocations/projectquota/")
    assert listed.status_code == 200 and "nlp-llm" in listed.content.decode()
    assert client.get("/admin/allocations/projectquota/add/").status_code == 403

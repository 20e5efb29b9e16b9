"""Every bad input is a 400 naming the field, never a 500, and nothing stored changes."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.utils import timezone

from allocations.models import Allocation, Flavor, Quota
from audit.models import AuditEvent
from tenants.models import Project
from tests.conftest import World


def body(world: World, **overrides: Any) -> dict[str, Any]:
    return {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": 1, "justification": "why",
            **world.window(), **overrides}


def later(days: float) -> str:
    return (timezone.now() + datetime.timedelta(days=days)).isoformat()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"quantity": 0}, "quantity"),
        ({"quantity": -3}, "quantity"),
        ({"quantity": 1.5}, "quantity"),
        ({"quantity": "two"}, "quantity"),
        ({"quantity": None}, "quantity"),
        ({"quantity": 10**9}, "quantity"),
        ({"flavor": 999999}, "flavor"),
        ({"flavor": "a100"}, "flavor"),
        ({"project": 999999}, "project"),
        ({"priority_class": 999999}, "priority_class"),
        ({"cluster": 999999}, "cluster"),
        ({"starts_at": later(2), "ends_at": later(1)}, "ends_at"),
        ({"starts_at": later(-3), "ends_at": later(1)}, "starts_at"),
        ({"starts_at": later(0.01), "ends_at": later(400)}, "ends_at"),
        ({"ends_at": "next tuesday"}, "ends_at"),
        ({"justification": "x" * 2001}, "justification"),
        ({"justification": ""}, "justification"),
    ],
)
def test_it_names_the_bad_field_of_an_allocation_request(world: World, overrides: dict[str, Any], field: str) -> None:
    events = AuditEvent.objects.count()
    response = world.client("nlp_member").post("/api/v1/allocations/", body(world, **overrides), format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert field in error["fields"], error
    assert Allocation.objects.count() == 0
    assert AuditEvent.objects.count() == events


def test_it_hides_a_project_of_another_department_as_an_unknown_one(world: World) -> None:
    response = world.client("vision_member").post("/api/v1/allocations/", body(world), format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"]["project"] == [f'Invalid pk "{world.llm.pk}" - object does not exist.']


def test_it_answers_malformed_json_with_a_400_naming_the_body(world: World) -> None:
    response = world.client("nlp_member").post(
        "/api/v1/allocations/", data='{"project": 1, "quantity": ', content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"
    assert "body" in response.json()["error"]["fields"]


def test_it_refuses_a_body_that_is_not_an_object(world: World) -> None:
    response = world.client("nlp_member").post("/api/v1/allocations/", data="[1, 2]", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"]


@pytest.mark.parametrize(
    ("slug", "message_part"),
    [("Bad_Slug", "namespace"), ("-lead", "namespace"), ("x" * 64, "63"), ("kube-system", "reserved"), ("default", "reserved")],
)
def test_it_refuses_a_project_slug_that_is_not_a_namespace_name(world: World, slug: str, message_part: str) -> None:
    response = world.client("nlp_admin").post(
        "/api/v1/projects/", {"slug": slug, "name": "n", "department": world.nlp.pk}, format="json"
    )
    assert response.status_code == 400
    messages = " ".join(response.json()["error"]["fields"]["slug"])
    assert message_part in messages
    assert not Project.objects.filter(slug=slug).exists()


def test_it_refuses_a_duplicate_project_slug(world: World) -> None:
    response = world.client("nlp_admin").post(
        "/api/v1/projects/", {"slug": "nlp-llm", "name": "again", "department": world.nlp.pk}, format="json"
    )
    assert response.status_code == 400
    assert "slug" in response.json()["error"]["fields"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"sharing_mode": "mig"}, "mig_profile"),
        ({"sharing_mode": "mps"}, "replicas"),
        ({"sharing_mode": "mps", "replicas": 64}, "replicas"),
        ({"gpu_equivalents": "0.5"}, "gpu_equivalents"),
        ({"gpu_equivalents": "1.5"}, "gpu_equivalents"),
        ({"resource_name": "gpu"}, "resource_name"),
        ({"sharing_mode": "quantum"}, "sharing_mode"),
        ({"name": "Not A Slug"}, "name"),
    ],
)
def test_it_refuses_flavors_the_real_components_would_reject(world: World, overrides: dict[str, Any], field: str) -> None:
    flavor = {"name": "l40s", "display_name": "L40S", "gpu_model": "NVIDIA-L40S", "sharing_mode": "exclusive",
              "resource_name": "nvidia.com/gpu", "memory_mib": 46068, "compute_percent": 100, "gpu_equivalents": "1",
              **overrides}
    response = world.client("platform").post("/api/v1/flavors/", flavor, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]
    assert not Flavor.objects.filter(name=flavor["name"]).exists()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"guaranteed": "5", "limit": "4"}, "guaranteed"),
        ({"limit": "2.5"}, "limit"),
        ({"limit": "-1"}, "limit"),
        ({"department": 424242}, "department"),
    ],
)
def test_it_refuses_inconsistent_quotas(world: World, overrides: dict[str, Any], field: str) -> None:
    before = list(Quota.objects.order_by("pk").values_list("pk", "limit"))
    quota = {"department": world.vision.pk, "flavor": world.mig.pk, "guaranteed": "1", "limit": "4", **overrides}
    response = world.client("platform").post("/api/v1/quotas/", quota, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]
    assert list(Quota.objects.order_by("pk").values_list("pk", "limit")) == before


@pytest.mark.parametrize(
    ("query", "field"),
    [("state=dancing", "state"), ("department=abc", "department"), ("mine=perhaps", "mine")],
)
def test_it_names_a_bad_filter(world: World, query: str, field: str) -> None:
    response = world.client("nlp_member").get(f"/api/v1/allocations/?{query}")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]


def test_it_answers_a_forbidden_transition_with_409_and_the_state(world: World) -> None:
    client = world.client("nlp_member")
    created = client.post("/api/v1/allocations/", body(world), format="json").json()
    assert client.post(f"/api/v1/allocations/{created['id']}/release/", {}, format="json").status_code == 200
    response = world.client("nlp_admin").post(f"/api/v1/allocations/{created['id']}/approve/", {}, format="json")
    assert response.status_code == 409
    assert response.json()["error"] == {
        "code": "transition_not_allowed",
        "message": f"Allocation #{created['id']} is cancelled; only a pending request can be approved.",
        "fields": {},
        "details": {"state": "cancelled", "target": "approved"},
    }


@pytest.mark.django_db(transaction=True)
def test_it_answers_an_exceeded_quota_with_409_and_the_numbers(world: World) -> None:
    client = world.client("nlp_member")
    created = client.post("/api/v1/allocations/", body(world, quantity=9), format="json").json()
    response = world.client("nlp_admin").post(f"/api/v1/allocations/{created['id']}/approve/", {}, format="json")
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["details"]["requested"] == "9"
    assert error["details"]["in_use"] == "0"
    assert error["details"]["limit"] == "8"


def test_it_refuses_renewal_to_a_bad_date(world: World) -> None:
    created = world.client("nlp_member").post("/api/v1/allocations/", body(world), format="json").json()
    for ends_at in ("not a date", later(-1)):
        response = world.client("nlp_member").post(
            f"/api/v1/allocations/{created['id']}/renew/", {"ends_at": ends_at}, format="json"
        )
        assert response.status_code == 400
        assert "ends_at" in response.json()["error"]["fields"]


def test_it_answers_a_token_request_without_password_with_a_400(world: World) -> None:
    response = world.client(None).post("/api/v1/auth/token/", {"username": "nlp_member"}, format="json")
    assert response.status_code == 400
    assert "password" in response.json()["error"]["fields"]

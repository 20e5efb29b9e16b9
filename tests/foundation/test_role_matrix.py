"""Role × endpoint × outcome. Outsiders get 404 (they cannot tell the object exists), people who
can see an object but lack the role get 403, anonymous callers 401."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.utils import timezone

from allocations import services
from allocations.models import Allocation
from tests.conftest import World

PERSONAS = ["nlp_member", "nlp_admin", "speech_member", "vision_member", "vision_admin", "auditor", "platform", "nobody", None]


def pending(world: World) -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=1,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=2),
        justification="role matrix",
    )


def expect(table: dict[str | None, int], persona: str | None) -> int:
    return table[persona]


READ_ALLOCATION = {"nlp_member": 200, "nlp_admin": 200, "speech_member": 404, "vision_member": 404,
                   "vision_admin": 404, "auditor": 200, "platform": 200, "nobody": 404, None: 401}
DECIDE = {"nlp_member": 403, "nlp_admin": 200, "speech_member": 404, "vision_member": 404,
          "vision_admin": 404, "auditor": 403, "platform": 200, "nobody": 404, None: 401}
RELEASE = {"nlp_member": 200, "nlp_admin": 200, "speech_member": 404, "vision_member": 404,
           "vision_admin": 404, "auditor": 403, "platform": 200, "nobody": 404, None: 401}
REQUEST = {"nlp_member": 201, "nlp_admin": 201, "speech_member": 400, "vision_member": 400,
           "vision_admin": 400, "auditor": 403, "platform": 201, "nobody": 400, None: 401}
CREATE_FLAVOR = {"nlp_member": 403, "nlp_admin": 403, "speech_member": 403, "vision_member": 403,
                 "vision_admin": 403, "auditor": 403, "platform": 201, "nobody": 403, None: 401}
CREATE_PROJECT_IN_NLP = {"nlp_member": 403, "nlp_admin": 201, "speech_member": 400, "vision_member": 400,
                         "vision_admin": 400, "auditor": 403, "platform": 201, "nobody": 400, None: 401}
READ_PROJECT = {"nlp_member": 200, "nlp_admin": 200, "speech_member": 404, "vision_member": 404,
                "vision_admin": 404, "auditor": 200, "platform": 200, "nobody": 404, None: 401}


@pytest.mark.parametrize("persona", PERSONAS)
def test_it_shows_an_allocation_only_within_reach(world: World, persona: str | None) -> None:
    allocation = pending(world)
    response = world.client(persona).get(f"/api/v1/allocations/{allocation.pk}/")
    assert response.status_code == expect(READ_ALLOCATION, persona)


@pytest.mark.parametrize("action", ["approve", "reject"])
@pytest.mark.parametrize("persona", PERSONAS)
def test_it_lets_only_department_and_platform_admins_decide(
    world: World, persona: str | None, action: str, django_capture_on_commit_callbacks: Any
) -> None:
    allocation = pending(world)
    with django_capture_on_commit_callbacks(execute=False):
        response = world.client(persona).post(
            f"/api/v1/allocations/{allocation.pk}/{action}/", {"comment": "decided"}, format="json"
        )
    assert response.status_code == expect(DECIDE, persona), response.content
    allocation.refresh_from_db()
    assert (allocation.state != "pending") == (response.status_code == 200)


@pytest.mark.parametrize("persona", PERSONAS)
def test_it_lets_members_and_admins_release(world: World, persona: str | None) -> None:
    allocation = pending(world)
    response = world.client(persona).post(f"/api/v1/allocations/{allocation.pk}/release/", {}, format="json")
    assert response.status_code == expect(RELEASE, persona), response.content


@pytest.mark.parametrize("persona", PERSONAS)
def test_it_lets_only_project_members_and_admins_request(world: World, persona: str | None) -> None:
    body = {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": 1, "justification": "x", **world.window()}
    response = world.client(persona).post("/api/v1/allocations/", body, format="json")
    assert response.status_code == expect(REQUEST, persona), response.content
    if response.status_code == 400:
        assert "project" in response.json()["error"]["fields"]
    assert Allocation.objects.count() == (1 if response.status_code == 201 else 0)


@pytest.mark.parametrize("persona", PERSONAS)
def test_it_lets_only_platform_admins_change_the_catalogue(world: World, persona: str | None) -> None:
    body = {"name": "l40s", "display_name": "L40S", "gpu_model": "NVIDIA-L40S", "sharing_mode": "exclusive",
            "resource_name": "nvidia.com/gpu", "memory_mib": 46068, "compute_percent": 100, "gpu_equivalents": "1"}
    response = world.client(persona).post("/api/v1/flavors/", body, format="json")
    assert response.status_code == expect(CREATE_FLAVOR, persona), response.content


@pytest.mark.parametrize("persona", PERSONAS)
def test_it_lets_department_admins_create_projects_in_their_department(world: World, persona: str | None) -> None:
    body = {"slug": "nlp-new", "name": "New", "department": world.nlp.pk}
    response = world.client(persona).post("/api/v1/projects/", body, format="json")
    assert response.status_code == expect(CREATE_PROJECT_IN_NLP, persona), response.content


@pytest.mark.parametrize("persona", PERSONAS)
def test_it_shows_a_project_only_within_reach(world: World, persona: str | None) -> None:
    response = world.client(persona).get(f"/api/v1/projects/{world.llm.pk}/")
    assert response.status_code == expect(READ_PROJECT, persona)


@pytest.mark.parametrize(
    ("persona", "departments", "quotas", "clusters"),
    [
        ("nlp_member", {"nlp", "nlp-speech"}, 4, 1),
        ("speech_member", {"nlp-speech"}, 0, 1),
        ("vision_admin", {"vision"}, 2, 1),
        ("auditor", {"acme", "nlp", "nlp-speech", "vision"}, 7, 1),
        ("platform", {"acme", "nlp", "nlp-speech", "vision"}, 7, 1),
        ("nobody", set(), 0, 0),
    ],
)
def test_it_filters_every_list_by_tenant(
    world: World, persona: str, departments: set[str], quotas: int, clusters: int
) -> None:
    client = world.client(persona)
    assert {row["slug"] for row in client.get("/api/v1/departments/").json()["results"]} == departments
    assert client.get("/api/v1/quotas/").json()["count"] == quotas
    assert client.get("/api/v1/clusters/").json()["count"] == clusters
    pending(world)
    visible = client.get("/api/v1/allocations/").json()["count"]
    assert visible == (1 if "nlp" in departments else 0)

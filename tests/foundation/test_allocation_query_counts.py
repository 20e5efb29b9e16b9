"""The allocation API's busiest requests run a fixed number of queries, however big the world.

Each request is measured as an API client sends it (a personal access token in the
``Authorization`` header), in a small world and again once it holds many more allocations,
projects, departments, memberships, flavors and priority classes. The counts must be equal and
equal to the numbers below: a count that grows is an N+1, a count that changes is a new query on
the busiest paths (say why in the commit that changes the number). The approval is counted apart
from its service (``allocations.grants.services.allocation_approve``: quotas and placement, whose reads
are the placement engine's own business), the view around it must stay as cheap.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, AllocationState, Flavor, PriorityClass, Quota, SharingMode
from tenants.access import access_forget
from tenants.access_tokens import access_token_create
from tenants.models import Department, Membership, Project, Role
from tests.conftest import H100, World

SUBMIT_QUERIES = 12
"""Token; the caller's roles and the department tree; the project with the caller's membership;
flavor; default priority class; savepoint; the class held FOR KEY SHARE; the recipients (the
admins up the tree, one query); the allocation and its notification (one statement on
PostgreSQL); the audit event; savepoint released. Nothing to serialise the answer.
(SQLite appends an audit event in three statements and inserts the notification apart, PostgreSQL
in one each: ``submit_queries``.)"""
APPROVE_QUERIES_AROUND_THE_SERVICE = 7
"""Token; roles; tree; the allocation, visible; after the service: the allocation for the answer,
its reservations, its pending change."""
LIST_QUERIES = 7
"""Token; roles; tree; count; the page; its reservations; its pending changes."""
DETAIL_QUERIES = 6
"""Token; roles; tree; the allocation; its reservations; its pending change."""


def submit_queries() -> int:
    return SUBMIT_QUERIES if connection.vendor == "postgresql" else SUBMIT_QUERIES + 3


class Caller:
    """An API client authenticated with a personal access token of scope write."""

    def __init__(self, world: World, persona: str) -> None:
        self.key = access_token_create(actor=world.users[persona], name="counts", scope="write").key
        self.client = Client()

    def get(self, url: str, **params: Any) -> Any:
        return self.client.get(url, params, HTTP_AUTHORIZATION=f"Token {self.key}")

    def post(self, url: str, body: dict[str, Any]) -> Any:
        return self.client.post(url, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Token {self.key}")


def submit_body(world: World) -> dict[str, Any]:
    start = timezone.now() + datetime.timedelta(minutes=5)
    return {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": 1, "starts_at": start.isoformat(),
            "ends_at": (start + datetime.timedelta(days=1)).isoformat(), "justification": "counted"}  # fmt: skip


@contextmanager
def service_queries_apart(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts the queries ``services.allocation_approve`` runs, to take them off the request's."""
    inside: list[int] = []
    original = services.allocation_approve

    def counted(**kwargs: Any) -> Allocation:
        with CaptureQueriesContext(connection) as queries:
            result = original(**kwargs)
        inside.append(len(queries.captured_queries))
        return result

    with monkeypatch.context() as patch:
        patch.setattr(services, "allocation_approve", counted)
        yield inside


def counted(call: Callable[[], Any], status: int) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = call()
    assert response.status_code == status, response.content[:500]
    return len(queries.captured_queries)


def measure(world: World, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    member, admin = Caller(world, "nlp_member"), Caller(world, "nlp_admin")
    for caller in (member, admin):  # the first use of a token records it; later ones within a minute do not
        assert caller.get("/api/v1/me/").status_code == 200
    counts = {"submit": counted(lambda: member.post("/api/v1/allocations/", submit_body(world)), 201)}
    submitted = Allocation.objects.order_by("-pk").values_list("pk", flat=True)[0]
    with service_queries_apart(monkeypatch) as inside:
        total = counted(lambda: admin.post(f"/api/v1/allocations/{submitted}/approve/", {"comment": "ok"}), 200)
    counts["approve (around the service)"] = total - sum(inside)
    counts["list"] = counted(lambda: member.get("/api/v1/allocations/", page_size=500), 200)
    counts["detail"] = counted(lambda: member.get(f"/api/v1/allocations/{submitted}/"), 200)
    return counts


def grow(world: World, count: int) -> None:
    """``count`` more of everything the requests could read per row: departments under the
    requester's (with projects the requester is a member of, and roles on them), allocations in
    every state that matters (with live reservations), flavors and priority classes."""
    member, admin = world.users["nlp_member"], world.users["nlp_admin"]
    Quota.objects.update(limit=Decimal(100000))
    start = timezone.now()
    for tag in range(count):
        suffix = f"{Department.objects.count()}-{tag}"
        team = Department.objects.create(slug=f"grown-{suffix}", name=f"Grown {suffix}", parent=world.nlp)
        Membership.objects.create(user=member, department=team, role=Role.RESEARCHER)
        Membership.objects.create(user=admin, department=team, role=Role.DEPARTMENT_ADMIN)
        project = Project.objects.create(slug=f"grown-{suffix}", name=f"Grown {suffix}", department=team)
        project.members.add(member)
        for user in (member, admin):
            access_forget(user)
        Flavor.objects.create(
            name=f"h100-half-{suffix}", display_name=f"H100 half {suffix}", gpu_model=H100,
            sharing_mode=SharingMode.MPS, resource_name="nvidia.com/gpu.shared", replicas=2, memory_mib=40960,
            compute_percent=50, gpu_equivalents=Decimal("0.5"),
        )  # fmt: skip
        PriorityClass.objects.create(name=f"grown-{suffix}", value=10 + len(suffix) + tag)
        Allocation.objects.bulk_create([
            Allocation(project=target, flavor=world.a100, quantity=1, priority_class=world.standard, starts_at=start,
                       ends_at=start + datetime.timedelta(days=2), justification="grown", requested_by=member,
                       state=state)
            for target in (world.llm, project)
            for state in (AllocationState.PENDING, AllocationState.REJECTED, AllocationState.CANCELLED)
        ])  # fmt: skip
        for target in (world.llm, project):
            allocation = services.allocation_request(
                actor=member, project=target, flavor=world.mig, quantity=1, priority_class=world.standard,
                starts_at=start, ends_at=start + datetime.timedelta(days=2), justification="grown",
            )
            services.allocation_approve(actor=admin, allocation_id=allocation.pk, comment="grown")


@pytest.mark.django_db
def test_the_allocation_api_runs_as_many_queries_in_a_big_world_as_in_a_small_one(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    grow(world, 1)
    small = measure(world, monkeypatch)
    assert small == {
        "submit": submit_queries(),
        "approve (around the service)": APPROVE_QUERIES_AROUND_THE_SERVICE,
        "list": LIST_QUERIES,
        "detail": DETAIL_QUERIES,
    }
    grow(world, 4)
    assert Allocation.objects.count() > 30
    assert measure(world, monkeypatch) == small

"""The request form's live feedback reads the department tree's grants once: its quota lines' segments
are cut from what its decision read (``Decision.decided``: the tree, the quotas, their windows and
the grant rows), not read again, and say exactly what reading them again says. The feedback call's queries are counted, so that a
read added back (or one per grant) fails here."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, Flavor, PriorityClass
from allocations.quotas import usage
from allocations.quotas.usage import checks_with_segments
from frontend.feedback import _decided
from frontend.outlook import admission_read, request_allocation
from tenants.models import Project
from tests.conftest import World
from tests.frontend.conftest import Login

pytestmark = pytest.mark.django_db
DAY = datetime.timedelta(days=1)

FEEDBACK_QUERIES = 32
"""The feedback call on the role-matrix world (one candidate cluster, PostgreSQL): the session and
the access check, the form's choices, the placement dry run (the candidate clusters, the kept
state's version, the workload), the decision (quota tree, windows, caps, the tree's grants once);
the quota lines read nothing of their own (they read the tree, the quotas, their windows and the
grants again before: 36)."""


def grant(world: World, *, project: Project, flavor: Flavor, quantity: int, priority_class: PriorityClass,
          starts_in: datetime.timedelta, days: float) -> Allocation:
    start = timezone.now() + starts_in
    allocation = services.allocation_request(
        actor=world.users["nlp_member"] if project == world.llm else world.users["speech_member"], project=project,
        flavor=flavor, quantity=quantity, priority_class=priority_class, starts_at=start,
        ends_at=start + datetime.timedelta(days=days), justification="held",
    )
    return services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)


def busy_tree(world: World) -> None:
    """nlp and its speech team hold grants of several flavors and classes over staggered intervals."""
    for project, flavor, quantity, priority_class, starts_in, days in (
        (world.llm, world.a100, 2, world.standard, datetime.timedelta(0), 2),
        (world.llm, world.a100, 1, world.standard, DAY, 3),
        (world.llm, world.a100, 2, world.preemptible, datetime.timedelta(hours=6), 1.5),
        (world.speech_project, world.a100, 1, world.standard, datetime.timedelta(hours=12), 4),
        (world.speech_project, world.a100, 1, world.standard, datetime.timedelta(hours=12), 4),
        (world.llm, world.mig, 3, world.standard, datetime.timedelta(0), 5),
        (world.llm, world.h100, 1, world.preemptible, 2 * DAY, 1),
    ):
        grant(world, project=project, flavor=flavor, quantity=quantity, priority_class=priority_class,
              starts_in=starts_in, days=days)


@pytest.mark.parametrize("flavor", ["a100", "mig", "h100"])
@pytest.mark.parametrize("priority", ["standard", "preemptible"])
@pytest.mark.parametrize("quantity", [1, 4, 9])
def test_segments_from_the_decisions_rows_equal_the_grants_read_again(
    world: World, flavor: str, priority: str, quantity: int
) -> None:
    busy_tree(world)
    for starts_in, days in ((datetime.timedelta(0), 1), (DAY, 3), (datetime.timedelta(hours=3), 7)):
        start = timezone.now() + starts_in
        request = request_allocation(project=world.llm, flavor=getattr(world, flavor), quantity=quantity,
                                     priority_class=getattr(world, priority), cluster=None,
                                     span=(start, start + datetime.timedelta(days=days)))
        admission = admission_read(allocation=request)
        decided = _decided(admission)
        assert decided is not None, admission.decision
        checks = admission.decision.checks
        assert checks
        assert checks_with_segments(allocation=request, checks=checks, decided=decided) == checks_with_segments(
            allocation=request, checks=checks)


def test_a_request_that_holds_itself_reads_the_grants_again(world: World) -> None:
    """The decision leaves the request's own grant out; its segments count it, so they are read."""
    held = grant(world, project=world.llm, flavor=world.a100, quantity=2, priority_class=world.standard,
                 starts_in=datetime.timedelta(0), days=2)
    assert _decided(admission_read(allocation=held)) is None


def feedback_params(world: World) -> dict[str, Any]:
    return {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": 1, "priority_class": world.standard.pk,
            "duration_days": 2}


def test_the_feedback_reads_the_trees_grants_once(world: World, login: Login, monkeypatch: pytest.MonkeyPatch) -> None:
    busy_tree(world)
    client = login("nlp_member")
    assert client.get("/allocations/new/feedback/", feedback_params(world)).status_code == 200  # warm the kept state
    read_again: list[object] = []
    held_rows = usage.held_rows

    def counted(**kwargs: Any) -> list[dict[str, Any]]:
        read_again.append(kwargs)
        return held_rows(**kwargs)

    monkeypatch.setattr(usage, "held_rows", counted)
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/allocations/new/feedback/", feedback_params(world))
    assert response.status_code == 200
    assert "feedback-quota" in response.content.decode()  # the quota lines are there, with their segments
    assert read_again == []
    if connection.vendor == "postgresql":  # SQLite keeps no placement state: it reads the nodes each time
        assert len(queries.captured_queries) == FEEDBACK_QUERIES, [query["sql"][:120] for query in queries]

"""Query budgets of ``GET /api/v1/usage/``: one department's month by day and every department's
month run a fixed number of queries, however many departments, quotas, grants and days there are
(the department tree is read once, by the access check; the quotas in two more). Counted, not timed."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounting.models import UsageDay
from allocations.models import Allocation, AllocationState, Quota
from tenants.access import access_forget
from tenants.models import Department, Project
from tests.conftest import World
from tests.telemetry.usage_history import aligned_now

pytestmark = pytest.mark.django_db
DAY = datetime.timedelta(days=1)


def grow(world: World, count: int, *, month: datetime.datetime) -> None:
    """``count`` more departments under nlp, each with a project, an A100 quota, a grant holding
    over the month and a day of usage on each of the month's first ten days."""
    admin = world.users["platform"]
    start = len(Department.objects.filter(slug__startswith="grown-"))
    departments = Department.objects.bulk_create(
        [Department(slug=f"grown-{n}", name=f"Grown {n}", parent=world.nlp) for n in range(start, start + count)]
    )
    projects = Project.objects.bulk_create(
        [Project(slug=f"{d.slug}-p", name=f"{d.name} project", department=d) for d in departments]
    )
    Quota.objects.bulk_create([Quota(department=d, flavor=world.a100, guaranteed=1, limit=4) for d in departments])
    Allocation.objects.bulk_create([
        Allocation(project=project, flavor=world.a100, quantity=1, priority_class=world.standard, cluster=world.cluster,
                   starts_at=month - DAY, ends_at=month + 40 * DAY, justification="budget", state=AllocationState.ACTIVE,
                   requested_by=admin, decided_by=admin, decided_at=month - DAY)
        for project in projects
    ])  # fmt: skip
    UsageDay.objects.bulk_create([
        UsageDay(day=month + n * DAY, cluster=world.cluster, department=project.department, project=project,
                 flavor=world.a100, granted=Decimal(24), measured=Decimal(12), used=Decimal(6))
        for project in projects for n in range(10)
    ])  # fmt: skip


def queries(world: World, persona: str, params: dict[str, Any]) -> tuple[int, int]:
    """(rows answered, queries run) of one request, as a fresh request sees it."""
    access_forget(world.users[persona])
    with CaptureQueriesContext(connection) as captured:
        response = world.client(persona).get("/api/v1/usage/", params)
    assert response.status_code == 200, response.content
    return len(response.json()["rows"]), len(captured.captured_queries)


# the memberships, the department tree (once: the access check's), the whole days, the quotas, their
# approved windows, what the quotas hold at the instant and over the range
BUDGET = 7


@pytest.mark.parametrize(
    ("persona", "department", "granularity"),
    [("nlp_admin", "nlp", "day"), ("platform", "nlp", "day"), ("platform", None, "month"), ("auditor", None, "month")],
)
def test_the_usage_of_a_month_runs_a_fixed_number_of_queries(
    world: World, persona: str, department: str | None, granularity: str
) -> None:
    month = aligned_now().replace(day=1, hour=0) - 40 * DAY
    month = month.replace(day=1)
    params: dict[str, Any] = {"from": month.isoformat(), "to": (month + 30 * DAY).isoformat(), "granularity": granularity}
    if department is not None:
        params["department"] = getattr(world, department).pk
    grow(world, 2, month=month)
    rows, few = queries(world, persona, params)
    grow(world, 6, month=month)
    more_rows, many = queries(world, persona, params)
    assert more_rows > rows  # the answer grew ...
    assert many == few == BUDGET  # ... the queries did not

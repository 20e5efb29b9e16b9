"""``GET /api/v1/usage/``: the GPU-equivalent-hours of what the reader may see, by hour, day or
month and by department, project, flavor or cluster; bad parameters are a 400 naming the field,
a department or project the reader cannot read a 404."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest

from accounting.apis import ReportOut, report_data
from accounting.rolling import usage_hours_roll
from accounting.selectors import usage_report
from tests.conftest import World
from tests.telemetry.usage_history import HOUR, aligned_now, fill, grant

pytestmark = pytest.mark.django_db
DAY = datetime.timedelta(days=1)


@pytest.fixture
def history(world: World) -> datetime.datetime:
    """nlp/llm: 2 A100 for 30 hours, half busy; vision/seg: 1 H100 for 10 hours, unmeasured."""
    now = aligned_now()
    nlp = grant(world, since=now - 30 * HOUR, quantity=2)
    fill(nlp, start=now - 30 * HOUR, end=now, activity=0.5)
    grant(world, since=now - 10 * HOUR, project="seg", flavor="h100")
    usage_hours_roll(start=now - 2 * DAY, end=now, now=now)
    return now


def get(world: World, persona: str | None, **params: Any) -> Any:
    return world.client(persona).get("/api/v1/usage/", params)


def test_a_platform_admin_sees_every_department_and_the_totals_add_up(world: World, history: datetime.datetime) -> None:
    start = (history - 2 * DAY).isoformat()
    body = get(world, "platform", **{"from": start, "to": history.isoformat(), "granularity": "month"}).json()
    granted: dict[str, Decimal] = {}
    for row in body["rows"]:  # one row per department and month (the range may cross a month)
        granted[row["name"]] = granted.get(row["name"], Decimal(0)) + Decimal(row["totals"]["granted_gpu_hours"])
    assert granted == {"nlp": Decimal(60), "vision": Decimal(10)}
    total = body["total"]
    assert Decimal(total["granted_gpu_hours"]) == Decimal(70) and Decimal(total["used_gpu_hours"]) == Decimal(30)
    assert total["coverage"] == pytest.approx(60 / 70) and total["efficiency"] == pytest.approx(0.5)


def test_a_researcher_sees_only_their_department_and_gets_404_for_another(world: World, history: datetime.datetime) -> None:
    body = get(world, "nlp_member", **{"from": (history - 2 * DAY).isoformat(), "granularity": "day"}).json()
    assert {row["name"] for row in body["rows"]} == {"nlp"}
    assert Decimal(body["total"]["granted_gpu_hours"]) == Decimal(60)
    assert get(world, "nlp_member", department=world.vision.pk).status_code == 404
    assert get(world, "nlp_member", project=world.seg.pk).status_code == 404
    assert get(world, "vision_member", department=world.vision.pk).json()["total"]["efficiency"] is None  # unmeasured
    assert get(world, "nobody").status_code == 404
    assert get(world, None).status_code == 401


def test_hours_group_by_project_flavor_or_cluster_and_a_department_includes_its_children(
    world: World, history: datetime.datetime
) -> None:
    hours = get(world, "platform", **{"from": (history - 3 * HOUR).isoformat(), "granularity": "hour", "group_by": "flavor"}).json()
    assert [(row["period"][11:16], row["name"], row["totals"]["granted_gpu_hours"]) for row in hours["rows"]][:2] == [
        ((history - 3 * HOUR).strftime("%H:%M"), "a100", "2.000000"),
        ((history - 3 * HOUR).strftime("%H:%M"), "h100", "1.000000"),
    ]
    assert len(hours["rows"]) == 6
    acme = get(world, "platform", department=world.acme.pk, group_by="none", **{"from": (history - 2 * DAY).isoformat()}).json()
    assert Decimal(acme["total"]["granted_gpu_hours"]) == Decimal(70) and {row["name"] for row in acme["rows"]} == {"all"}
    project = get(world, "nlp_admin", project=world.llm.pk, group_by="project", **{"from": (history - 2 * DAY).isoformat()})
    assert {row["name"] for row in project.json()["rows"]} == {world.llm.slug}
    by_cluster = get(world, "platform", cluster=world.cluster.pk, group_by="cluster").json()
    assert {row["key"] for row in by_cluster["rows"]} == {world.cluster.pk}
    assert get(world, "platform", cluster=999_999).status_code == 404


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"granularity": "week"}, "granularity"),
        ({"group_by": "user"}, "group_by"),
        ({"from": "yesterday"}, "from"),
        ({"from": "2026-11-02T00:00:00Z", "to": "2026-11-01T00:00:00Z"}, "to"),
        ({"from": "2026-01-01T00:00:00Z", "to": "2026-11-01T00:00:00Z", "granularity": "hour"}, "from"),
        ({"department": "nlp"}, "department"),
    ],
)
def test_bad_parameters_are_a_400_naming_the_field(world: World, params: dict[str, str], field: str) -> None:
    response = get(world, "platform", **params)
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]


def test_the_answer_is_what_its_schema_serializer_would_write(world: World, history: datetime.datetime) -> None:
    for granularity, group_by in (("hour", "flavor"), ("day", "department"), ("month", "none")):
        report = usage_report(user=world.users["platform"], start=history - 2 * DAY, end=history, granularity=granularity,
                              group_by=group_by)  # fmt: skip
        assert report.rows
        assert report_data(report) == ReportOut(report).data

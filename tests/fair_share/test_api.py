"""``GET /api/v1/fair-share/`` (every role, the departments it reads, the whole tree's ranks) and
``PATCH /api/v1/fair-share/{department}/`` (platform admins set shares; audited)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from allocations.fair_share.services import fair_share_tick
from audit.models import AuditEvent
from tenants.models import Department
from tests.conftest import World
from tests.telemetry.usage_history import HOUR, aligned_now, grant

pytestmark = pytest.mark.django_db
URL = "/api/v1/fair-share/"


@pytest.fixture
def history(world: World) -> datetime.datetime:
    """nlp's own project held 2 A100 for 10 hours, vision 1 H100 as long; nobody else anything."""
    now = aligned_now()
    grant(world, since=now - 10 * HOUR, until=now, quantity=2)
    grant(world, since=now - 10 * HOUR, until=now, project="seg", flavor="h100")
    fair_share_tick(now=now)
    return now


def rows(world: World, persona: str) -> dict[tuple[str, bool], dict[str, Any]]:
    body = world.client(persona).get(URL).json()
    return {(row["slug"], row["own_projects"]): row for row in body["rows"]}


def ranks(world: World) -> dict[tuple[str, bool], int | None]:
    return {key: row["rank"] for key, row in rows(world, "platform").items() if row["rank"] is not None}


def test_it_lists_the_tree_with_shares_usage_and_ranks(world: World, history: datetime.datetime) -> None:
    """Under acme: its own projects (no usage: ∞), nlp (2/3 of the usage: LF 1/3 ÷ 2/3 = 0.5),
    vision (1/3: LF 1.0). So acme's own projects rank 4 of 4, vision 3; under nlp, the speech team
    (no usage) 2, nlp's own projects 1."""
    body = world.client("platform").get(URL).json()
    assert body["half_life_hours"] == 168 and body["leaf_count"] == 4
    assert body["as_of"].startswith(history.strftime("%Y-%m-%dT%H:%M"))
    assert [(row["slug"], row["own_projects"], row["depth"]) for row in body["rows"]] == [
        ("acme", False, 0), ("acme", True, 1), ("nlp", False, 1), ("nlp", True, 2), ("nlp-speech", False, 2),
        ("vision", False, 1),
    ]  # fmt: skip
    found = {(row["slug"], row["own_projects"]): row for row in body["rows"]}
    nlp, vision, own = found[("nlp", False)], found[("vision", False)], found[("acme", True)]
    assert nlp["share"] == pytest.approx(1 / 3) and nlp["usage_share"] == pytest.approx(2 / 3)
    assert nlp["level_fairshare"] == pytest.approx(0.5) and nlp["rank"] is None and nlp["factor"] is None
    assert vision["level_fairshare"] == pytest.approx(1.0) and (vision["rank"], vision["factor"]) == (3, 0.75)
    assert own["level_fairshare"] is None and own["usage_gpu_hours"] == 0 and (own["rank"], own["factor"]) == (4, 1.0)
    assert own["parent"] == world.acme.pk and own["name"] == "own projects" and own["shares"] == 1
    assert nlp["usage_gpu_hours"] == pytest.approx(2 * vision["usage_gpu_hours"])
    assert 9.7 < vision["usage_gpu_hours"] < 10  # ten hours, the oldest weighing 0.5^(10/168)
    assert (found[("nlp-speech", False)]["rank"], found[("nlp", True)]["rank"]) == (2, 1)
    assert found[("nlp", True)]["usage_gpu_hours"] == nlp["usage_gpu_hours"]  # nlp's usage is its own projects'
    assert found[("acme", False)]["usage_gpu_hours"] == pytest.approx(3 * vision["usage_gpu_hours"])


def test_each_role_reads_its_departments_with_the_whole_trees_ranks(world: World, history: datetime.datetime) -> None:
    assert set(rows(world, "nlp_member")) == {("nlp", False), ("nlp", True), ("nlp-speech", False)}
    assert set(rows(world, "speech_member")) == {("nlp-speech", False)}
    assert rows(world, "vision_member")[("vision", False)]["rank"] == 3
    assert set(rows(world, "vision_member")) == {("vision", False)}
    assert len(rows(world, "auditor")) == len(rows(world, "platform")) == 6  # the auditor holds the root
    assert world.client("nobody").get(URL).status_code == 404
    assert world.client(None).get(URL).status_code == 401


def test_before_any_tick_everybody_ties_first(world: World, settings: Any) -> None:
    settings.GPUPORTAL_FAIR_SHARE_HALF_LIFE_HOURS = 24
    body = world.client("platform").get(URL).json()
    assert body["as_of"] is None and body["half_life_hours"] == 24
    assert {row["factor"] for row in body["rows"] if row["rank"] is not None} == {1.0}
    assert all(row["level_fairshare"] is None for row in body["rows"])


def test_a_platform_admin_sets_shares_and_the_ranking_follows(world: World, history: datetime.datetime) -> None:
    """With 4 shares to vision's 1, nlp's LF becomes (4/6) ÷ (2/3) = 1.0 and vision's (1/6) ÷ (1/3)
    = 0.5: nlp's departments now rank above vision."""
    url = f"{URL}{world.nlp.pk}/"
    response = world.client("platform").patch(url, {"shares": 4}, format="json")
    assert response.status_code == 200
    assert response.json()["shares"] == 4 and response.json()["share"] == pytest.approx(4 / 6)
    assert ranks(world) == {("acme", True): 4, ("nlp-speech", False): 3, ("nlp", True): 2, ("vision", False): 1}
    event = AuditEvent.objects.get(action="fair_share.shares_set")
    assert (event.department_id, event.actor_username, event.target_id) == (world.nlp.pk, "platform", str(world.nlp.pk))
    assert event.before == {"shares": 1} and event.after == {"shares": 4, "department": "nlp"}

    assert world.client("platform").patch(url, {"shares": 4}, format="json").status_code == 200
    assert AuditEvent.objects.filter(action="fair_share.shares_set").count() == 1  # nothing changed, nothing recorded


@pytest.mark.parametrize("value", [0, -3, 1_000_001, "many", 2.5, True, None])
def test_a_bad_number_of_shares_is_a_400_naming_it(world: World, value: Any) -> None:
    response = world.client("platform").patch(f"{URL}{world.nlp.pk}/", {"shares": value}, format="json")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["shares"]


def test_a_missing_body_names_the_field_and_others_may_not_set_shares(world: World) -> None:
    url = f"{URL}{world.nlp.pk}/"
    assert list(world.client("platform").patch(url, {}, format="json").json()["error"]["fields"]) == ["shares"]
    assert world.client("nlp_admin").patch(url, {"shares": 2}, format="json").status_code == 403
    assert world.client("auditor").patch(url, {"shares": 2}, format="json").status_code == 403
    assert world.client("vision_admin").patch(url, {"shares": 2}, format="json").status_code == 404
    assert world.client("nobody").patch(url, {"shares": 2}, format="json").status_code == 404
    assert world.client("platform").patch(f"{URL}999999/", {"shares": 2}, format="json").status_code == 404
    assert not AuditEvent.objects.filter(action="fair_share.shares_set").exists()


def test_the_table_costs_the_same_queries_however_many_departments(world: World, history: datetime.datetime) -> None:
    def counted() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert world.client("platform").get(URL).status_code == 200
        return len(queries.captured_queries)

    counted()  # the reader's roles are read once per user object
    before = counted()
    for n in range(3):
        team = Department.objects.create(slug=f"vision-team-{n}", name=f"Team {n}", parent=world.vision)
        grant(world, since=history - HOUR, until=history, project="seg")
        Department.objects.create(slug=f"vision-team-{n}-sub", name="Sub", parent=team)
    assert counted() == before

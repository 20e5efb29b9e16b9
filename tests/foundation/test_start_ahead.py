"""How far ahead a request may start (GPUPORTAL_MAX_START_AHEAD_DAYS).

A grant holds its GPUs and quota from approval on, so a start far in the future would hold them
for longer than the longest allocation: ``starts_at`` 9999-12-30 used to be accepted and approved.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.utils import timezone

from allocations.models import Allocation
from tests.conftest import World
from tests.foundation.test_settings import _boot

pytestmark = pytest.mark.django_db


def body(world: World, *, start: datetime.datetime, days: int = 2) -> dict[str, Any]:
    return {
        "project": world.llm.pk, "flavor": world.a100.pk, "quantity": 1, "justification": "later",
        "starts_at": start.isoformat(), "ends_at": (start + datetime.timedelta(days=days)).isoformat(),
    }


def test_a_start_in_the_far_future_is_refused_naming_starts_at(world: World) -> None:
    start = datetime.datetime(9999, 12, 30, tzinfo=datetime.UTC)
    response = world.client("nlp_member").post("/api/v1/allocations/", body(world, start=start, days=1), format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["fields"]) == ["starts_at"]
    assert "90 days ahead" in response.json()["error"]["fields"]["starts_at"][0]
    assert Allocation.objects.count() == 0

    within = world.client("nlp_member").post(
        "/api/v1/allocations/", body(world, start=timezone.now() + datetime.timedelta(days=89)), format="json"
    )
    assert within.status_code == 201, within.content


def test_the_bound_is_the_setting(world: World, settings: Any) -> None:
    settings.GPUPORTAL_MAX_START_AHEAD_DAYS = 10
    client = world.client("nlp_member")
    now = timezone.now()
    too_far = client.post("/api/v1/allocations/", body(world, start=now + datetime.timedelta(days=10, hours=1)), format="json")
    assert too_far.status_code == 400 and "starts_at" in too_far.json()["error"]["fields"]
    within = client.post("/api/v1/allocations/", body(world, start=now + datetime.timedelta(days=9)), format="json")
    assert within.status_code == 201, within.content



@pytest.mark.django_db(False)
def test_the_setting_is_parsed_like_the_others(tmp_path: object) -> None:
    result = _boot({"GPUPORTAL_DEBUG": "true", "GPUPORTAL_VAR_DIR": str(tmp_path), "GPUPORTAL_MAX_START_AHEAD_DAYS": "0"})
    assert result.returncode != 0
    assert "GPUPORTAL_MAX_START_AHEAD_DAYS must be at least 1" in result.stderr

"""GET /api/v1/quota-windows/shrinks/: the coming shrinks of the quotas within the caller's reach,
with the grants each would leave beyond its new limit and who to tell."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from allocations.models.windows import ShrinkPolicy
from tests.conftest import World
from tests.quotas.windowing import DAY, granted, quota, window

pytestmark = pytest.mark.django_db

URL = "/api/v1/quota-windows/shrinks/"
MINUTE = datetime.timedelta(minutes=1)


@pytest.fixture
def shrinks(world: World) -> dict[str, int]:
    hit = granted(world, quantity=6)
    now = timezone.now()
    nlp = window(world, quota(world, "nlp"), begins_at=now + 20 * MINUTE, ends_at=now + DAY, limit="4",
                 shrink_policy=ShrinkPolicy.RECLAIM)
    vision = window(world, quota(world, "vision"), begins_at=now + 50 * MINUTE, ends_at=now + DAY, limit="1")
    return {"hit": hit.pk, "nlp": nlp.pk, "vision": vision.pk}


def windows_seen(world: World, persona: str, query: str = "") -> list[int]:
    response = world.client(persona).get(URL + query)
    assert response.status_code == 200, response.content
    return [item["window"] for item in response.json()["results"]]


def test_a_member_sees_the_shrink_of_their_department_with_the_grants_it_hits_and_their_owners(
    world: World, shrinks: dict[str, int]
) -> None:
    body = world.client("nlp_member").get(URL).json()

    assert body["count"] == 1
    [item] = body["results"]
    assert (item["window"], item["department"], item["flavor"], item["priority_class"], item["kind"]) == (
        shrinks["nlp"], "nlp", None, None, "begin")
    assert (item["before"], item["after"], item["shrink_policy"]) == (
        {"guaranteed": "0", "limit": "10"}, {"guaranteed": "0", "limit": "4"}, "reclaim")
    [grant] = item["grants"]
    assert (grant["allocation"], grant["quantity"], grant["requested_by"], grant["members"], grant["notice_minutes"]) == (
        shrinks["hit"], 6, "nlp_member", ["nlp_member"], 15)
    assert item["owners"] == ["nlp_member"]


def test_each_caller_sees_only_the_shrinks_within_reach_and_as_far_ahead_as_asked(
    world: World, shrinks: dict[str, int]
) -> None:
    assert windows_seen(world, "vision_member") == []  # 50 minutes ahead: beyond the default 30
    assert windows_seen(world, "vision_member", "?within=60") == [shrinks["vision"]]
    assert windows_seen(world, "speech_member", "?within=60") == []  # nlp's quota is its parent's
    assert windows_seen(world, "auditor", "?within=60") == [shrinks["nlp"], shrinks["vision"]]
    assert windows_seen(world, "platform", "?within=60") == [shrinks["nlp"], shrinks["vision"]]
    assert windows_seen(world, "nobody", "?within=60") == []
    assert world.client(None).get(URL).status_code == 401


@pytest.mark.parametrize("within", ["0", "10081", "soon"])
def test_a_bad_horizon_is_a_400_naming_within(world: World, within: str) -> None:
    response = world.client("nlp_member").get(URL, {"within": within})
    assert response.status_code == 400
    assert "within" in str(response.json())

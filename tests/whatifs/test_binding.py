"""A what-if says which level of each department's quota chain held its waiting demand back, under
the current policy and the proposed one: the level admission's refusal names, read by an admin
over the API (docs/twin.md, "What-if")."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from allocations.models import Quota
from tests.conftest import World
from tests.whatifs.history import over_nlp_limit
from whatifs.services import what_if_create, what_if_run

pytestmark = pytest.mark.django_db

RAISE_NLP = [{"kind": "quota", "department": "nlp", "limit_delta": 4}]


def _held_back(world: World, persona: str) -> dict[str, Any]:
    made = what_if_create(actor=world.users[persona], changes=RAISE_NLP, history_days=7)
    run = what_if_run(what_if_id=made.pk)
    assert run is not None and run.result is not None, run.error if run else None
    return {row["department"]: row["binding"] for row in run.result["departments"]}


def _shares(side: dict[str, Any]) -> dict[tuple[str, str], float]:
    return {(level["kind"], level["department"]): level["pct"] for level in side["levels"]}


def test_nlps_own_limit_holds_it_back_until_the_raise_lets_it_in(world: World) -> None:
    over_nlp_limit(world)  # nlp: 6 + 6 A100s against its limit of 10; acme: 6 + 2 + 6 of its 16
    nlp = _held_back(world, "nlp_admin")["nlp"]
    assert _shares(nlp["current"]) == {("own", "nlp"): 100.0, ("parent", "acme"): 0.0}
    assert nlp["current"]["waiting_gpu_h"] == pytest.approx(6 * 47, abs=0.5)  # 6 A100s waited 47 hours
    assert nlp["current"]["words"].startswith("nlp: waited 2,820 min at p95; nlp's own limit bound 100 %")
    assert nlp["proposed"] == {"waiting_gpu_h": 0.0, "levels": [
        {"kind": "own", "department": "nlp", "gpu_h": 0.0, "pct": 0.0},
        {"kind": "parent", "department": "acme", "gpu_h": 0.0, "pct": 0.0}], "words": "nlp: no demand waited"}


def test_when_acmes_limit_binds_raising_nlps_alone_leaves_acme_named(world: World) -> None:
    Quota.objects.filter(department=world.acme, flavor=None).update(limit=Decimal(12))
    over_nlp_limit(world)  # now acme: 6 + 2 + 6 is beyond its 12 as well as nlp's 10
    held_back = _held_back(world, "platform")
    nlp = held_back["nlp"]
    # both fail now: the refusal names the nearest, nlp's own; raised by 4, nlp's passes and acme's refuses
    assert _shares(nlp["current"])[("own", "nlp")] == 100.0
    assert _shares(nlp["proposed"]) == {("own", "nlp"): 0.0, ("parent", "acme"): 100.0}
    assert "acme's limit bound 100 % of the GPU-hours waiting, nlp's own limit 0 %" in nlp["proposed"]["words"]
    assert held_back["vision"]["current"]["words"] == "vision: no demand waited"


def test_the_api_gives_the_levels_to_whoever_may_read_the_what_if(world: World,
                                                                    django_capture_on_commit_callbacks: Any) -> None:
    over_nlp_limit(world)
    with django_capture_on_commit_callbacks(execute=True):
        answer = world.client("platform").post("/api/v1/what-ifs/", {"changes": RAISE_NLP, "history_days": 7},
                                               format="json")
    assert answer.status_code == 202, answer.content
    shown = world.client("platform").get(answer["Location"]).json()
    nlp = next(row for row in shown["result"]["departments"] if row["department"] == "nlp")
    assert nlp["binding"]["current"]["levels"][0] == {"kind": "own", "department": "nlp", "gpu_h": pytest.approx(282, abs=3),
                                                      "pct": 100.0}
    assert world.client("vision_admin").get(answer["Location"]).status_code == 404

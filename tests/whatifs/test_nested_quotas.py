"""A parent's quota binds its children in the twin as in the portal's admission: the same small
scenario approved through the services and replayed from the live policy."""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal

import pytest

from allocations.models import Quota
from kernel.errors import QuotaExceeded
from tests.conftest import World
from tests.quotas.windowing import approve, ask
from twin.replay.engine import replay
from twin.workload import jobs_read
from whatifs.sources import flavor_shapes, inventory_nodes, live_policy

pytestmark = pytest.mark.django_db


def _twin_starts(lines: list[dict[str, object]], *, flat: bool = False) -> list[float | None]:
    policy = live_policy()
    if flat:
        policy = dataclasses.replace(policy, departments=tuple(dataclasses.replace(d, parent=None)
                                                               for d in policy.departments))
    jobs = jobs_read("".join(json.dumps(line) + "\n" for line in lines), flavors=flavor_shapes())
    outcome = replay(jobs, inventory_nodes(), policy, "full", horizon=7200.0)
    return [record.first_start for record in outcome.records]


def _line(at: int, department: str, project: str, flavor: str, quantity: int) -> dict[str, object]:
    return {"submit_at": at, "department": department, "project": project, "flavor": flavor, "quantity": quantity,
            "runtime_s": 3600, "requested_s": 3600, "priority_class": "gpu-standard", "busy": 0.5}


def test_acmes_limit_refuses_nlp_in_the_portal_and_holds_it_back_in_the_twin(world: World) -> None:
    Quota.objects.filter(department=world.acme, flavor=None).update(limit=Decimal(12))
    vision = approve(world, ask(world, quantity=6, flavor="h100", project="seg", persona="vision_member"),
                     "vision_admin")
    assert vision.state == "approved"
    with pytest.raises(QuotaExceeded) as refusal:  # nlp: 8 of its 10, but acme: 6 + 8 of 12
        approve(world, ask(world, quantity=8))
    assert refusal.value.details["department"] == "acme"
    assert approve(world, ask(world, quantity=6)).state == "approved"  # 6 + 6: within acme's 12

    vision_line = _line(0, "vision", "vision-seg", "h100", 6)
    assert _twin_starts([vision_line, _line(60, "nlp", "nlp-llm", "a100", 8)]) == [0.0, 3600.0]  # waits for vision
    assert _twin_starts([vision_line, _line(60, "nlp", "nlp-llm", "a100", 6)]) == [0.0, 60.0]
    assert _twin_starts([vision_line, _line(60, "nlp", "nlp-llm", "a100", 8)], flat=True) == [0.0, 60.0]

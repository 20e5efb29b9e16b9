"""Ticks racing on PostgreSQL: the upsert on (allocation, bucket_start, source) leaves one row each."""

from __future__ import annotations

import pytest

from telemetry.models import AllocationUsage
from telemetry.usage.ticking import allocations_utilisation_tick
from tests.conftest import World, build_world, requires_postgres
from tests.telemetry.usage.scene import TICK_AT, book_everything, build_scene
from tests.threads import all_at_once

pytestmark = [requires_postgres(), pytest.mark.django_db(transaction=True)]


def test_ticks_racing_for_one_bucket_write_each_row_once(prometheus_url: str) -> None:
    world: World = build_world()
    scene = build_scene(world, prometheus_url=prometheus_url)
    book_everything(scene)

    def tick() -> str:
        return f"{allocations_utilisation_tick(now=TICK_AT).rows} rows"

    outcomes = all_at_once([tick, tick, tick, tick])
    assert outcomes == {f"{len(scene.grants)} rows": 4}
    assert AllocationUsage.objects.count() == len(scene.grants)
    assert AllocationUsage.objects.filter(allocation=scene.grants["W1"]).get().activity == 0.6

"""The periodic tasks are thin wrappers: each runs its service and returns what it did."""

from __future__ import annotations

from tests.conftest import World


def test_the_periodic_tasks_run(world: World) -> None:
    from telemetry import tasks

    assert tasks.telemetry_nodes_mark_stale_task.delay().get() == 0
    assert tasks.telemetry_samples_roll_up_task.delay().get() == {"5m": 0, "1h": 0}
    assert tasks.telemetry_samples_trim_task.delay().get() == {"raw": 0, "5m": 0, "1h": 0}

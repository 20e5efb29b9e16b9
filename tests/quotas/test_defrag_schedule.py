"""Periodic defragmentation (``GPUPORTAL_DEFRAG_EVERY``): per active cluster, only units that have
not started move, at most the move budget per run (the rest on later runs), each run that moves (or,
in dry-run, would move) audited as ``placement.defrag_run``; the beat entry exists only when the
interval is set."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

from allocations.booking.defrag import cluster_fragmentation, defrag_plan
from allocations.booking.defrag_schedule import BudgetedPlanner, defrag_scheduled_run
from allocations.booking.view import node_rows
from allocations.catalogue.selectors import live_reservations_on
from allocations.models import Allocation, AllocationState, Reservation
from allocations.tasks import placement_defrag_scheduled_task
from audit.models import AuditEvent
from clusters.models import Cluster, ClusterPush
from tests.conftest import World, build_world
from tests.foundation.test_placement_defrag import book, holding, live_places

pytestmark = pytest.mark.django_db

SETTINGS = Path(__file__).resolve().parents[2] / "gpuportal" / "settings.py"


@pytest.fixture
def spread() -> tuple[World, Allocation, list[Allocation]]:
    """One 8-GPU A100 node: a running grant holds a MIG slice on GPU 0; three grants that start in
    three days hold two slices each, one per GPU on GPUs 1-6: seven GPUs partly used, where one
    would do (seven 1g slices fill one GPU)."""
    world = build_world(a100_gpus=8, h100_gpus=0)
    running = holding(world, flavor=world.mig, quantity=1, state=AllocationState.ACTIVE, starts_in_days=-1)
    book(running, [("a100-0", 0, 0)])
    future = []
    for first in (1, 3, 5):
        allocation = holding(world, flavor=world.mig, quantity=2, state=AllocationState.ACTIVE, starts_in_days=3)
        book(allocation, [("a100-0", first, 0), ("a100-0", first + 1, 0)])
        future.append(allocation)
    return world, running, future


def moved_units() -> int:
    return Reservation.objects.filter(release_reason="moved").count()


def fragmentation_now(cluster: Cluster) -> dict[str, int]:
    return cluster_fragmentation(nodes=node_rows(cluster), reservations=list(live_reservations_on(cluster=cluster))).as_dict()


def test_a_run_moves_only_units_that_have_not_started_and_audits_the_plan(
    spread: tuple[World, Allocation, list[Allocation]],
) -> None:
    world, running, future = spread
    before = fragmentation_now(world.cluster)
    [run] = defrag_scheduled_run(budget=16, dry_run=False)
    assert live_places(running) == [("a100-0", (0,), 0)]
    assert {gpus for allocation in future for _, gpus, _ in live_places(allocation)} == {(0,)}
    event = AuditEvent.objects.get(action="placement.defrag_run")
    assert (event.actor_username, event.target_type, event.target_id) == ("", "clusters.cluster", str(world.cluster.pk))
    assert event.details["fragmentation_before"] == before == event.before["fragmentation"]
    assert event.details["fragmentation_after"] == fragmentation_now(world.cluster) == event.after["fragmentation"]
    assert (event.details["fragmentation_after"]["partly_used"], event.details["fragmentation_after"]["free_whole"]) == (0, 7)
    assert len(event.details["moves_applied"]) == moved_units() == len(run.plan.moves) == event.details["moves_wanted"]
    assert {move["allocation"] for move in event.details["moves_applied"]} <= {a.pk for a in future}
    assert AuditEvent.objects.filter(action="allocation.moved").count() == len({m.allocation_id for m in run.plan.moves})
    assert ClusterPush.objects.filter(cluster=world.cluster, project__isnull=True).exists()
    # Nothing better is left: the next run moves nothing and writes no event.
    assert defrag_scheduled_run(budget=16, dry_run=False)[0].plan.moves == []
    assert AuditEvent.objects.filter(action="placement.defrag_run").count() == 1


def test_a_run_keeps_to_its_move_budget_and_the_next_runs_move_the_rest(
    spread: tuple[World, Allocation, list[Allocation]],
) -> None:
    world, _, future = spread
    wanted = len(defrag_plan(cluster=world.cluster).moves)
    assert wanted > 2
    [first] = defrag_scheduled_run(budget=2, dry_run=False)
    assert 0 < moved_units() <= 2 and len(first.plan.moves) == moved_units()
    assert first.wanted == wanted
    event = AuditEvent.objects.get(action="placement.defrag_run")
    assert event.details["move_budget"] == 2 and event.details["moves_wanted"] == wanted
    assert len(event.details["moves_applied"]) == moved_units()
    assert event.details["fragmentation_after"] == fragmentation_now(world.cluster)
    for _ in range(wanted):  # each run moves at most two units, and gains
        before = moved_units()
        runs = defrag_scheduled_run(budget=2, dry_run=False)
        assert moved_units() - before <= 2
        if not runs[0].plan.moves:
            break
    assert fragmentation_now(world.cluster)["partly_used"] == 0
    assert {gpus for allocation in future for _, gpus, _ in live_places(allocation)} == {(0,)}


def test_the_budgeted_planner_returns_a_complete_plan_within_the_budget(
    spread: tuple[World, Allocation, list[Allocation]],
) -> None:
    world, _, _ = spread
    for budget in range(0, 8):
        planner = BudgetedPlanner(budget=budget)
        plan = planner(cluster=world.cluster)
        assert len(plan.moves) <= budget
        assert plan.movable_units == 6 and plan.movable_allocations == 3
        if plan.moves:
            assert plan.after.better_than(plan.before)


def test_a_dry_run_changes_nothing_and_audits_the_moves_it_would_make(
    spread: tuple[World, Allocation, list[Allocation]],
) -> None:
    world, _, future = spread
    places = [live_places(allocation) for allocation in future]
    before = fragmentation_now(world.cluster)
    [run] = defrag_scheduled_run(budget=16, dry_run=True)
    assert [live_places(allocation) for allocation in future] == places and moved_units() == 0
    assert not AuditEvent.objects.filter(action="allocation.moved").exists()
    event = AuditEvent.objects.get(action="placement.defrag_run")
    assert event.details["dry_run"] is True and "moves_applied" not in event.details
    assert len(event.details["moves_proposed"]) == len(run.plan.moves) > 0
    assert event.before["fragmentation"] == event.after["fragmentation"] == before == fragmentation_now(world.cluster)
    assert (event.details["fragmentation_after"]["partly_used"], event.details["fragmentation_after"]["free_whole"]) == (0, 7)


def the_task_once() -> dict[str, Any]:
    """Run the Celery task (eagerly) and return its one cluster's summary."""
    summaries: list[dict[str, Any]] = placement_defrag_scheduled_task.apply().get()
    [summary] = summaries
    return summary


def test_the_task_reads_the_settings_and_skips_inactive_clusters(
    spread: tuple[World, Allocation, list[Allocation]], settings: Any,
) -> None:
    world, _, _ = spread
    settings.GPUPORTAL_DEFRAG_MOVE_BUDGET = 3
    settings.GPUPORTAL_DEFRAG_DRY_RUN = True
    Cluster.objects.create(name="idle", is_active=False)
    summary = the_task_once()
    assert summary["cluster"] == world.cluster.name and summary["dry_run"] is True
    assert summary["move_budget"] == 3 and 0 < len(summary["moves_proposed"]) <= 3
    assert moved_units() == 0
    settings.GPUPORTAL_DEFRAG_DRY_RUN = False
    summary = the_task_once()
    assert 0 < len(summary["moves_applied"]) == moved_units() <= 3


def test_an_empty_cluster_is_reported_without_an_audit_event(world: World) -> None:
    [run] = defrag_scheduled_run(budget=16, dry_run=False)
    assert run.plan.moves == [] and run.summary()["moves_applied"] == []
    assert not AuditEvent.objects.filter(action="placement.defrag_run").exists()


def _beat(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, Any]:
    monkeypatch.setenv("GPUPORTAL_DEBUG", "true")
    for name in ("GPUPORTAL_DEFRAG_EVERY", "GPUPORTAL_DEFRAG_MOVE_BUDGET", "GPUPORTAL_DEFRAG_DRY_RUN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    loaded = runpy.run_path(str(SETTINGS))
    return loaded


def test_the_beat_entry_exists_only_when_an_interval_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    off = _beat(monkeypatch)
    assert "placement-defrag" not in off["CELERY_BEAT_SCHEDULE"]
    assert (off["GPUPORTAL_DEFRAG_EVERY"], off["GPUPORTAL_DEFRAG_MOVE_BUDGET"], off["GPUPORTAL_DEFRAG_DRY_RUN"]) == (0, 16, False)
    assert "placement-defrag" not in _beat(monkeypatch, GPUPORTAL_DEFRAG_EVERY="0")["CELERY_BEAT_SCHEDULE"]
    on = _beat(monkeypatch, GPUPORTAL_DEFRAG_EVERY="7200", GPUPORTAL_DEFRAG_MOVE_BUDGET="4", GPUPORTAL_DEFRAG_DRY_RUN="true")
    assert on["CELERY_BEAT_SCHEDULE"]["placement-defrag"] == {
        "task": "allocations.tasks.placement_defrag_scheduled_task", "schedule": 7200.0,
    }
    assert (on["GPUPORTAL_DEFRAG_MOVE_BUDGET"], on["GPUPORTAL_DEFRAG_DRY_RUN"]) == (4, True)

"""``manage.py placement_defrag``: moves only units that have not started, proposes moves only
when they leave fewer GPUs partly used, changes nothing on --dry-run, and audits what it applies."""

from __future__ import annotations

import datetime
import io
import json

import pytest
from django.core.management import call_command
from django.utils import timezone

from allocations.booking.defrag import defrag_apply, defrag_plan
from allocations.booking.view import placement_view, unit_shape
from allocations.models import Allocation, AllocationState, Flavor, Reservation
from audit.models import AuditEvent
from clusters.models import ClusterPush, Node
from tests.conftest import World, build_world

pytestmark = pytest.mark.django_db


def holding(world: World, *, flavor: Flavor, quantity: int, state: str, starts_in_days: float) -> Allocation:
    start = timezone.now() + datetime.timedelta(days=starts_in_days)
    return Allocation.objects.create(
        project=world.llm, flavor=flavor, quantity=quantity, priority_class=world.standard, cluster=world.cluster,
        starts_at=start, ends_at=start + datetime.timedelta(days=2), justification="defrag", state=state,
        requested_by=world.users["nlp_member"],
    )


def book(allocation: Allocation, places: list[tuple[str, int, int | None]]) -> None:
    for unit, (node, gpu, start) in enumerate(places):
        Reservation.objects.create(
            allocation=allocation, unit=unit, node=Node.objects.get(name=node), gpu_indices=[gpu],
            gpu_milli=0 if start is not None else 1000, mig_profile="1g.10gb" if start is not None else "",
            mig_start=start, cpu_millicores=allocation.flavor.cpu_millicores_per_unit,
            memory_mib=allocation.flavor.memory_mib_per_unit,
        )


def live_places(allocation: Allocation) -> list[tuple[str, tuple[int, ...], int | None]]:
    rows = allocation.reservations.filter(released_at__isnull=True).select_related("node").order_by("unit")
    return [(row.node.name, tuple(row.gpu_indices), row.mig_start) for row in rows]


@pytest.fixture
def scattered() -> tuple[World, Allocation, Allocation]:
    """One 8-GPU A100 node: a running allocation holds a slice on GPU 0; a future one holds
    single slices on GPUs 1, 2 and 3, so four GPUs are partly used."""
    world = build_world(a100_gpus=8, h100_gpus=0)
    running = holding(world, flavor=world.mig, quantity=1, state=AllocationState.ACTIVE, starts_in_days=-1)
    book(running, [("a100-0", 0, 0)])
    future = holding(world, flavor=world.mig, quantity=3, state=AllocationState.ACTIVE, starts_in_days=3)
    book(future, [("a100-0", 1, 0), ("a100-0", 2, 0), ("a100-0", 3, 0)])
    return world, running, future


def test_the_plan_packs_future_units_and_never_moves_started_ones(scattered: tuple[World, Allocation, Allocation]) -> None:
    world, running, future = scattered
    plan = defrag_plan(cluster=world.cluster)
    assert (plan.movable_allocations, plan.movable_units) == (1, 3)
    assert (plan.before.partly_used, plan.before.free_whole) == (4, 4)
    assert (plan.after.partly_used, plan.after.free_whole) == (1, 7)  # all four slices on one GPU
    assert plan.after.stranded_milli < plan.before.stranded_milli
    assert {move.allocation_id for move in plan.moves} == {future.pk}
    assert all(move.target.startswith("a100-0 gpu0@") for move in plan.moves)


def test_a_dry_run_changes_nothing(scattered: tuple[World, Allocation, Allocation]) -> None:
    world, running, future = scattered
    before = live_places(future)
    events = AuditEvent.objects.count()
    out = io.StringIO()
    call_command("placement_defrag", "--dry-run", stdout=out)
    text = out.getvalue()
    assert "fragmentation before: 4 of 8 GPUs partly used" in text
    assert "fragmentation after:  1 of 8 GPUs partly used" in text
    assert "dry run: nothing changed" in text and f"#{future.pk} unit 0 a100-1g: a100-0 gpu1@0 -> a100-0 gpu0@" in text
    assert live_places(future) == before and AuditEvent.objects.count() == events


def test_applying_moves_the_rows_audits_each_allocation_and_queues_the_layout(
    scattered: tuple[World, Allocation, Allocation],
) -> None:
    world, running, future = scattered
    proposed = defrag_plan(cluster=world.cluster)
    plan = defrag_apply(cluster_id=world.cluster.pk)
    assert [move.as_dict() for move in plan.moves] == [move.as_dict() for move in proposed.moves]
    assert {node for node, _, _ in live_places(future)} == {"a100-0"}
    assert {gpus for _, gpus, _ in live_places(future)} == {(0,)}
    assert live_places(running) == [("a100-0", (0,), 0)]
    moved = Reservation.objects.filter(allocation=future, release_reason="moved")
    assert moved.count() == len(plan.moves)
    event = AuditEvent.objects.get(action="allocation.moved")
    assert event.target_id == str(future.pk)
    assert event.details["fragmentation_after"]["partly_used"] == 1
    assert len(event.before["placement"]) == len(event.after["placement"]) == len(plan.moves)
    assert ClusterPush.objects.filter(cluster=world.cluster, project__isnull=True).exists()
    # The engine accepts the new layout: every slice at a legal, unshared start. The running slice
    # and the future three never meet, so at most three are held at one instant.
    view = placement_view(cluster=world.cluster, shape=unit_shape(world.mig))
    assert view.engine is not None and view.engine.mig_compute_used() == 3
    # A second run finds nothing better.
    assert defrag_apply(cluster_id=world.cluster.pk).moves == []


def test_approved_units_are_movable_even_when_their_start_has_passed() -> None:
    world = build_world(a100_gpus=8, h100_gpus=0)
    waiting = holding(world, flavor=world.a100, quantity=2, state=AllocationState.APPROVED, starts_in_days=-0.1)
    book(waiting, [("a100-0", 3, None), ("a100-0", 6, None)])
    slices = holding(world, flavor=world.mig, quantity=1, state=AllocationState.ACTIVE, starts_in_days=-1)
    book(slices, [("a100-0", 5, 0)])
    plan = defrag_plan(cluster=world.cluster)
    assert plan.movable_units == 2
    assert plan.after.partly_used == plan.before.partly_used == 1  # whole GPUs never strand capacity
    assert plan.moves == []  # nothing gained, nothing proposed


def test_the_json_output_lists_clusters_moves_and_units_granted_before_placement(
    scattered: tuple[World, Allocation, Allocation],
) -> None:
    world, _, _ = scattered
    legacy = holding(world, flavor=world.a100, quantity=2, state=AllocationState.ACTIVE, starts_in_days=-1)
    out = io.StringIO()
    call_command("placement_defrag", world.cluster.name, "--dry-run", "--json", stdout=out)
    [plan] = json.loads(out.getvalue())
    assert plan["cluster"] == "test-cluster" and len(plan["moves"]) == 3
    assert plan["fragmentation_before"]["partly_used"] == 4
    assert plan["unplaced"] == [f"#{legacy.pk}: 2 × a100"]


def test_an_unknown_cluster_is_a_clear_error(world: World) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no cluster named 'nope'"):
        call_command("placement_defrag", "nope", "--dry-run")


def test_only_platform_admins_may_apply_a_plan(scattered: tuple[World, Allocation, Allocation]) -> None:
    from kernel.errors import NotAllowed

    world, _, future = scattered
    before = live_places(future)
    with pytest.raises(NotAllowed, match="Only platform admins may move GPU reservations"):
        defrag_apply(cluster_id=world.cluster.pk, actor=world.users["nlp_admin"])
    assert live_places(future) == before
    assert defrag_apply(cluster_id=world.cluster.pk, actor=world.users["platform"]).moves

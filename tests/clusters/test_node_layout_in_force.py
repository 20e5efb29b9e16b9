"""The MIG layout pushed to a node is the one in force now (issue 31, defect 1 downstream).

Two grants booked one after the other on the same slices never meet, so the placement engine
rightly books them on the same memory slices. The cluster, though, is told what to carve from the
grants it holds: when the timeline starts the second grant before the expiry of the first has run
(the expiry tick comes after the start, or the two touch at one instant), both hold capacity on
the cluster for a moment. The node's layout then renders the grant in force, never two instances
on one slice; a held grant keeps its instances only where nothing in force needs them.
"""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest

from allocations.booking.reservations import reservations_where
from allocations.grants import services
from allocations.grants.scheduling import allocations_start_due
from allocations.grants.services import allocations_expire
from allocations.models import Allocation, AllocationState, Flavor, SharingMode
from clusters.models import ClusterPush, PushState
from delivery.selectors import booked_gpu_layouts, mig_demand, node_plans
from delivery.services import cluster_scope
from kernel.clock import clock_now, clock_set
from tests.conftest import A100, World, build_world, requires_postgres

pytestmark = [pytest.mark.django_db(transaction=True), requires_postgres()]

DAY = datetime.timedelta(days=1)


def half_flavor() -> Flavor:
    return Flavor.objects.create(
        name="a100-mig-3g-40gb", display_name="A100 MIG 3g.40gb", gpu_model=A100, sharing_mode=SharingMode.MIG,
        mig_profile="3g.40gb", resource_name="nvidia.com/mig-3g.40gb", memory_mib=40192, compute_percent=42,
        gpu_equivalents=Decimal("0.4286"), cpu_millicores_per_unit=4000, memory_mib_per_unit=32768,
    )


def grant(world: World, flavor: Flavor, *, starts_at: datetime.datetime, quantity: int = 2) -> Allocation:
    request = services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=flavor, quantity=quantity,
        priority_class=world.standard, starts_at=starts_at, ends_at=starts_at + DAY, justification="a training run",
    )
    return services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=request.pk)


def places(allocation: Allocation) -> set[tuple[str, str]]:
    return {(node, label) for node, labels in reservations_where(allocation=allocation).items() for label in labels}


def carved(world: World) -> dict[str, tuple[tuple[str, int], ...]]:
    """Node → the layout of its one carved GPU (every test here books one GPU's two halves)."""
    out = {}
    for plan in node_plans(cluster=world.cluster):
        if plan.mig_groups:
            [group] = plan.mig_groups
            assert len(group.devices) == 1
            out[plan.name] = group.profiles
    return out


def back_to_back(world: World) -> tuple[Allocation, Allocation, str]:
    """A running grant of two 3g.40gb and a scheduled one on the same two slices right after it."""
    clock_set(clock_now().replace(hour=9, minute=0, second=0, microsecond=0))
    half = half_flavor()
    first = grant(world, half, starts_at=clock_now())
    second = grant(world, half, starts_at=first.ends_at)
    first.refresh_from_db()
    assert first.state == AllocationState.ACTIVE and second.state == AllocationState.SCHEDULED
    assert places(first) == places(second) and len(places(first)) == 2  # they never meet: the same slices
    [node] = {name for name, _ in places(first)}
    return first, second, node


@pytest.mark.parametrize("late", [datetime.timedelta(0), datetime.timedelta(seconds=30)])
def test_a_grant_started_before_the_expiry_of_the_one_before_it_on_its_slices_is_pushed_alone(
    late: datetime.timedelta,
) -> None:
    world = build_world(a100_gpus=8, h100_gpus=0)
    first, second, node = back_to_back(world)
    assert carved(world) == {node: (("3g.40gb", 2),)}

    clock_set(first.ends_at + late)  # the start tick runs; the expiry tick has not yet
    assert allocations_start_due() == 1
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == AllocationState.ACTIVE  # not expired yet: still on the cluster
    assert second.state == AllocationState.ACTIVE, second.failure_reason
    failed = ClusterPush.objects.exclude(state=PushState.DONE).values_list("state", "last_error")
    assert not failed, list(failed)  # the node's layout was pushed with the start
    assert carved(world) == {node: (("3g.40gb", 2),)}  # the second's two, not four
    assert cluster_scope(cluster=world.cluster).objects

    assert allocations_expire() == 1  # the expiry comes: the same two instances stay, now the second's
    assert carved(world) == {node: (("3g.40gb", 2),)}
    assert not ClusterPush.objects.exclude(state=PushState.DONE).exists()


def test_a_held_grant_past_its_end_keeps_its_instances_where_nothing_in_force_needs_them() -> None:
    """Before the expiry runs, a grant past its end still has its pods: its instances stay until
    the expiry pushes the node again, unless a grant in force needs their slices."""
    world = build_world(a100_gpus=8, h100_gpus=0)
    first, _, node = back_to_back(world)
    clock_set(first.ends_at + datetime.timedelta(seconds=10))  # the second's start not processed yet
    assert carved(world) == {node: (("3g.40gb", 2),)}
    [(carves, whole)] = booked_gpu_layouts(cluster=world.cluster).values()
    assert list(carves.values()) == [{"3g.40gb": 2}] and whole == set()


def test_units_granted_before_gpu_placement_are_carved_when_their_grant_starts_not_before() -> None:
    """The interim planner's demand (units with no reservation) follows the same rule: a scheduled
    grant's instances are carved when the timeline starts it, which pushes the layout again."""
    world = build_world(a100_gpus=8, h100_gpus=0)
    start = clock_now() + datetime.timedelta(hours=1)
    legacy = Allocation.objects.create(
        project=world.llm, flavor=world.mig, quantity=2, priority_class=world.standard, cluster=world.cluster,
        starts_at=start, ends_at=start + DAY, justification="legacy", requested_by=world.users["nlp_member"],
        state=AllocationState.SCHEDULED,
    )
    assert mig_demand(cluster=world.cluster) == {}
    Allocation.objects.filter(pk=legacy.pk).update(state=AllocationState.ACTIVE)
    assert mig_demand(cluster=world.cluster) == {A100: {"1g.10gb": 2}}

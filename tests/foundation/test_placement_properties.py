"""Property: whatever sequence of approvals and releases arrives, the stored reservations never
over-book a GPU, a MIG geometry or a node's CPU, every granted unit is booked exactly once, and
releasing everything leaves nothing booked."""

from __future__ import annotations

import datetime
from collections import defaultdict
from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocations.catalogue.states import HOLDING_STATES
from allocations.grants import services
from allocations.models import Allocation, Flavor, Reservation, SharingMode
from clusters.models import Node
from kernel.errors import CapacityExceeded, QuotaExceeded
from placement.mig import geometry_for_model
from tests.conftest import A100, World, build_world

pytestmark = pytest.mark.django_db

OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["a100", "mig", "mig3", "h100", "release"]), st.integers(min_value=1, max_value=4)),
    min_size=1,
    max_size=14,
)


class _Rollback(Exception):
    """Raised to undo one example's writes."""


@pytest.fixture
def small() -> tuple[World, dict[str, Flavor]]:
    world = build_world(a100_gpus=2, h100_gpus=2)
    Node.objects.filter(name="a100-0").update(cpu_millicores=40000)  # CPU binds before the slices do
    three = Flavor.objects.create(
        name="a100-3g", display_name="3g", gpu_model=A100, sharing_mode=SharingMode.MIG, mig_profile="3g.40gb",
        resource_name="nvidia.com/mig-3g.40gb", memory_mib=40192, compute_percent=42,
        gpu_equivalents=Decimal("0.4286"), cpu_millicores_per_unit=4000, memory_mib_per_unit=32768,
    )
    return world, {"a100": world.a100, "mig": world.mig, "mig3": three, "h100": world.h100}


def check_invariants() -> None:
    live = list(Reservation.objects.filter(released_at__isnull=True).select_related("node", "allocation"))
    per_gpu: dict[tuple[str, int], list[Reservation]] = defaultdict(list)
    cpu: dict[str, int] = defaultdict(int)
    for row in live:
        cpu[row.node.name] += row.cpu_millicores
        for index in row.gpu_indices:
            per_gpu[(row.node.name, index)].append(row)
    for (node, index), rows in per_gpu.items():
        carved = [row for row in rows if row.mig_profile]
        assert not carved or len(carved) == len(rows), f"{node}/{index} mixes MIG and whole or shared units"
        assert sum(row.gpu_milli for row in rows) <= 1000, f"{node}/{index} over-booked"
        geometry = geometry_for_model(A100, 81920)
        assert geometry is not None
        mask = compute = 0
        for row in carved:
            profile = geometry.profile(row.mig_profile)
            assert row.mig_start in profile.starts, f"{row.mig_profile} at illegal start {row.mig_start}"
            slices = profile.slice_mask(int(row.mig_start or 0))
            assert not mask & slices, f"{node}/{index}: overlapping MIG instances"
            mask |= slices
            compute += profile.compute
        assert compute <= 7
    for inventory_node in Node.objects.all():
        assert cpu[inventory_node.name] <= inventory_node.cpu_millicores, f"{inventory_node.name} CPU over-booked"
    for allocation in Allocation.objects.all():
        booked = sum(1 for row in live if row.allocation_id == allocation.pk)
        assert booked == (allocation.quantity if allocation.state in HOLDING_STATES else 0)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(operations=OPERATIONS)
def test_any_sequence_of_approvals_and_releases_keeps_the_bookings_consistent(
    small: tuple[World, dict[str, Flavor]], operations: list[tuple[str, int]]
) -> None:
    world, flavors = small
    try:
        with transaction.atomic():
            granted: list[Allocation] = []
            for kind, number in operations:
                if kind == "release":
                    if granted:
                        victim = granted.pop(number % len(granted))
                        services.allocation_release(actor=world.users["platform"], allocation_id=victim.pk)
                else:
                    h100 = kind == "h100"
                    start = timezone.now()
                    allocation = services.allocation_request(
                        actor=world.users["vision_member" if h100 else "nlp_member"],
                        project=world.seg if h100 else world.llm, flavor=flavors[kind], quantity=number,
                        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1),
                        justification="property",
                    )
                    try:
                        granted.append(services.allocation_approve(
                            actor=world.users["vision_admin" if h100 else "nlp_admin"], allocation_id=allocation.pk
                        ))
                    except (CapacityExceeded, QuotaExceeded):
                        pass
                check_invariants()
            for allocation in granted:
                services.allocation_release(actor=world.users["platform"], allocation_id=allocation.pk)
            assert not Reservation.objects.filter(released_at__isnull=True).exists()
            raise _Rollback
    except _Rollback:
        pass

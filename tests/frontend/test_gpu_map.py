"""The GPU map is drawn from live reservations: unbooked units are listed, queries stay fixed."""

from __future__ import annotations

import datetime
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, AllocationState, Reservation
from clusters.inventory import GpuSpec, node_upsert
from clusters.models import Node, NodeSharing
from frontend.gpu_map import gpu_map, gpu_map_links
from tests.conftest import A100, World
from tests.frontend.conftest import Login, pending

pytestmark = pytest.mark.django_db


def approved(world: World, *, flavor: str, quantity: int, project: str = "llm") -> Allocation:
    allocation = pending(world, persona="vision_member" if project == "seg" else "nlp_member", project=project,
                         flavor=flavor, quantity=quantity)
    admin = "vision_admin" if project == "seg" else "nlp_admin"
    return services.allocation_approve(actor=world.users[admin], allocation_id=allocation.pk)


def granted_before_placement(world: World, *, quantity: int) -> Allocation:
    """A holding allocation as granted before the placement engine existed: no reservation at all."""
    start = timezone.now()
    return Allocation.objects.create(
        project=world.seg, flavor=world.h100, quantity=quantity, priority_class=world.standard, cluster=world.cluster,
        starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="legacy",
        requested_by=world.users["vision_member"], state=AllocationState.ACTIVE,
    )


def test_it_lists_holding_units_without_a_live_reservation_as_unplaced(world: World, login: Login) -> None:
    partly = approved(world, flavor="mig", quantity=3)
    Reservation.objects.filter(pk=partly.reservations.get(unit=2).pk).update(
        released_at=timezone.now(), release_reason="test"
    )
    released = approved(world, flavor="a100", quantity=1)
    services.allocation_release(actor=world.users["nlp_member"], allocation_id=released.pk, comment="done")
    assert not released.reservations.filter(released_at__isnull=True).exists()
    # Created after the last approval: an approval would first book it on GPUs (reservations_adopt).
    legacy = granted_before_placement(world, quantity=2)

    drawn = gpu_map(cluster=world.cluster)
    assert drawn.unplaced == [f"#{partly.pk}: 1 × a100-1g", f"#{legacy.pk}: 2 × h100"]
    # Nothing of the legacy allocation is drawn: no GPU is guessed for it.
    h100 = next(node for node in drawn.nodes if node.name == "h100-0")
    assert all(gpu.mode is None and not gpu.segments for gpu in h100.gpus)
    # The released allocation holds nothing; the partly released one shows its two live instances.
    held = [gpu for node in drawn.nodes for gpu in node.gpus if gpu.segments]
    assert [(gpu.mode, gpu.used_percent, len(gpu.segments)) for gpu in held] == [("mig", 29, 2)]  # 2 of 7 slices
    assert {name for name, _ in drawn.legend} == {"nlp", "vision"}  # the legacy allocation's department too

    html = login("platform").get(f"/platform/clusters/{world.cluster.pk}/").content.decode()
    assert (f'id="map-unplaced">Not booked on GPUs (granted before GPU placement): #{partly.pk}: 1 × a100-1g, '
            f"#{legacy.pk}: 2 × h100</p>") in html


def test_it_draws_the_map_in_a_fixed_number_of_queries(world: World) -> None:
    approved(world, flavor="a100", quantity=1)
    with CaptureQueriesContext(connection) as small:
        gpu_map(cluster=world.cluster)
    for number in range(2, 6):
        node_upsert(actor=None, cluster=world.cluster, name=f"a100-{number}", cpu_millicores=128000,
                    memory_mib=1048576, gpus=[GpuSpec(index=i, model=A100, memory_mib=81920, mig_capable=True)
                                              for i in range(8)])
    Node.objects.filter(cluster=world.cluster, name__startswith="a100-").update(sharing=NodeSharing.MIG)
    approved(world, flavor="a100", quantity=4)
    approved(world, flavor="mig", quantity=9)
    approved(world, flavor="h100", quantity=3, project="seg")
    granted_before_placement(world, quantity=1)
    with CaptureQueriesContext(connection) as large:
        drawn = gpu_map(cluster=world.cluster)
    assert sum(len(gpu.segments) for node in drawn.nodes for gpu in node.gpus) >= 1 + 4 + 9 + 3
    assert len(large.captured_queries) == len(small.captured_queries) <= 4


def test_each_gpu_is_a_focusable_box_linking_to_its_grant_with_a_name_and_legible_labels(
    world: World, login: Login
) -> None:
    whole = approved(world, flavor="a100", quantity=1)
    shared = approved(world, flavor="mig", quantity=2)
    other = approved(world, flavor="mig", quantity=1, project="seg")
    row = whole.reservations.select_related("node").get()
    node, index = row.node.name, int(row.gpu_indices[0])
    html = login("platform").get(f"/platform/clusters/{world.cluster.pk}/").content.decode()

    name = f"GPU {index} on {node}: grant #{whole.pk} (nlp, 1 × a100), 100 % allocated; busy: unknown"
    assert f'<a class="gpu-tile" href="/allocations/{whole.pk}/" aria-label="{name}" title="{name}">' in html
    free = re.search(r'<span class="gpu-tile" tabindex="0" role="img" aria-label="(GPU \d+ on [^"]+: free; busy: unknown)"', html)
    assert free is not None  # a free GPU is focusable too, and says so
    # The labels are the page's text, not SVG text scaled down with a whole node's row.
    assert f'<span class="gpu-label">gpu{index} · 100%</span>' in html and "<text " not in html.split('id="map-title"')[1].split('id="defrag"')[0]

    # A GPU that two grants share names both and lists a link to each under its box.
    mig = {(r.node.name, int(r.gpu_indices[0])) for r in Reservation.objects.filter(allocation__in=[shared, other])}
    for node_name, gpu_index in mig:
        held = {r.allocation_id for r in Reservation.objects.filter(node__name=node_name, released_at__isnull=True)
                if int(r.gpu_indices[0]) == gpu_index}
        if held == {shared.pk, other.pk}:
            holders = re.search(rf'aria-label="GPU {gpu_index} on {node_name}: its grants">(.*?)</ul>', html, re.S)
            assert holders is not None
            assert f'<a href="/allocations/{shared.pk}/">#{shared.pk} nlp</a>' in holders.group(1)
            assert f'<a href="/allocations/{other.pk}/">#{other.pk} vision</a>' in holders.group(1)


def test_a_gpu_links_only_to_grants_the_reader_may_open(world: World) -> None:
    nlp = approved(world, flavor="a100", quantity=1)
    vision = approved(world, flavor="h100", quantity=1, project="seg")
    for persona, visible in (("platform", {nlp.pk, vision.pk}), ("nlp_admin", {nlp.pk}), ("auditor", {nlp.pk, vision.pk}),
                             ("nobody", set())):  # fmt: skip
        drawn = gpu_map_links(user=world.users[persona], drawn=gpu_map(cluster=world.cluster))
        cells = [cell for node in drawn.nodes for cell in node.gpus if cell.holders]
        linked = {cell.holders[0][0] for cell in cells if cell.link is not None}
        assert linked == visible, persona
        assert all(cell.link is None or cell.link == f"/allocations/{cell.holders[0][0]}/" for cell in cells)

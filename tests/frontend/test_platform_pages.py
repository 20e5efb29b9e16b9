"""Platform admin pages: cluster health, the GPU map and the catalogue."""

from __future__ import annotations

import datetime
import re
from collections import defaultdict
from decimal import Decimal

import pytest
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, Flavor, Reservation, SharingMode
from clusters.inventory import GpuSpec, node_upsert
from clusters.models import Cluster, ClusterPush, Node, NodeSharing, PushState
from frontend.gpu_map import gpu_map, unit_share
from placement.reserve import Reserve
from tests.conftest import H100, World
from tests.frontend.conftest import Login

pytestmark = pytest.mark.django_db


def granted(world: World, *, persona: str, project: str, flavor: str | Flavor, quantity: int) -> Allocation:
    """Request (``flavor``: a World attribute or a Flavor) and approve: the engine books the GPUs."""
    start = timezone.now()
    allocation = services.allocation_request(
        actor=world.users[persona], project=getattr(world, project),
        flavor=flavor if isinstance(flavor, Flavor) else getattr(world, flavor), quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=3),
        justification="portal tests",
    )
    admin = "vision_admin" if project == "seg" else "nlp_admin"
    return services.allocation_approve(actor=world.users[admin], allocation_id=allocation.pk)


def test_it_shows_cluster_sync_health(world: World, login: Login) -> None:
    Cluster.objects.filter(pk=world.cluster.pk).update(last_sync_at=timezone.now(), last_sync_error="")
    broken = Cluster.objects.create(name="broken", last_sync_at=timezone.now(), last_sync_error="connection refused")
    ClusterPush.objects.create(cluster=broken, available_at=timezone.now(), state=PushState.FAILED, attempts=8,
                               last_error="connection refused")
    ClusterPush.objects.create(cluster=broken, available_at=timezone.now())
    Cluster.objects.create(name="fresh")
    html = login("platform").get("/platform/clusters/").content.decode()
    rows = {name: row for row in html.split("<tr>")[1:] for name in ("test-cluster", "broken", "fresh") if name in row}
    assert 'class="health health-ok">ok' in rows["test-cluster"]
    assert "health-error" in rows["broken"] and "connection refused" in rows["broken"]
    assert "1 pending" in rows["broken"] and "1 failed" in rows["broken"] and "up to date" in rows["test-cluster"]
    assert "never synced" in rows["fresh"]
    assert '<td data-label="Nodes">3</td><td data-label="GPUs">24</td>' in rows["test-cluster"]  # nodes, GPUs


def booked(allocation: Allocation) -> dict[tuple[str, int], list[Reservation]]:
    """(node, GPU index) → the allocation's live reservations there, as stored by the placement engine."""
    out: dict[tuple[str, int], list[Reservation]] = defaultdict(list)
    for row in allocation.reservations.filter(released_at__isnull=True).select_related("node"):
        for index in row.gpu_indices:
            out[(row.node.name, int(index))].append(row)
    return dict(out)


def descriptions(html: str) -> dict[str, dict[int, str]]:
    """Node → GPU index → what holds the GPU, read from each GPU box's accessible name (without
    how busy it is)."""
    out: dict[str, dict[int, str]] = {}
    for index, node, text in re.findall(r'class="gpu-tile"[^>]*? aria-label="GPU (\d+) on ([^:"]+): ([^";]*)', html):
        out.setdefault(node, {})[int(index)] = text
    return out


def node_figure(html: str, node: str) -> str:
    match = re.search(rf"<figure class=\"node-map\">\s*<figcaption><strong>{node}</strong>.*?</figure>", html, re.S)
    assert match is not None, node
    return match.group(0)


def test_it_draws_each_gpus_share_by_department(world: World, login: Login) -> None:
    whole = granted(world, persona="nlp_member", project="llm", flavor="a100", quantity=2)
    mig = granted(world, persona="nlp_member", project="llm", flavor="mig", quantity=3)
    h100 = granted(world, persona="vision_member", project="seg", flavor="h100", quantity=1)
    html = login("platform").get(f"/platform/clusters/{world.cluster.pk}/").content.decode()
    gpus = descriptions(html)
    expected: dict[tuple[str, int], str] = {}
    for node, index in booked(whole):
        expected[(node, index)] = f"grant #{whole.pk} (nlp, 1 × a100), 100 % allocated"
    for node, index in booked(h100):
        expected[(node, index)] = f"grant #{h100.pk} (vision, 1 × h100), 100 % allocated"
    mig_gpus = booked(mig)
    for (node, index), rows in mig_gpus.items():  # a 1g.10gb instance is one of seven compute slices
        percent = round(Decimal(100 * len(rows)) / 7)
        expected[(node, index)] = f"grant #{mig.pk} (nlp, {len(rows)} × a100-1g), {percent} % allocated"
        for row in rows:  # drawn at its place over the eight memory slices
            assert row.mig_start is not None
            assert f'x="{row.mig_start * 100 / 8:.2f}" width="12.50" height="40"' in node_figure(html, node)
    assert len(expected) == 2 + len(mig_gpus) + 1  # no GPU holds two of these allocations
    for node, texts in gpus.items():
        for index, text in texts.items():
            assert text == expected.get((node, index), "free"), (node, index)
    assert sum(len(texts) for texts in gpus.values()) == 24
    assert html.count('class="mig-line"') == 7 * len(mig_gpus)  # MIG GPUs: eight memory slices
    assert "Delivery" in html and "project nlp-llm" in html  # the outbox rows of the approvals
    assert 'id="map-unplaced"' not in html
    legend = re.findall(r'fill="(#[0-9a-f]{6})"></rect></svg> (\w+)</li>', html)
    assert {name for _, name in legend} == {"nlp", "vision"} and len({colour for colour, _ in legend}) == 2


def test_it_refuses_the_platform_pages_to_department_admins(world: World, login: Login) -> None:
    for url in ("/platform/clusters/", f"/platform/clusters/{world.cluster.pk}/", "/platform/catalogue/"):
        assert login("nlp_admin").get(url).status_code == 403


def test_it_lists_the_catalogue(world: World, login: Login) -> None:
    html = login("platform").get("/platform/catalogue/").content.decode()
    for text in ("nvidia.com/mig-1g.10gb", "MIG slice 1g.10gb", "CUDA MPS replica × 4", "gpu-preemptible", "× 1.5",
                 "<strong>acme</strong> · GPU-equivalents"):
        assert text in html, text


def test_it_draws_whole_mig_and_replica_units_where_they_were_booked(world: World) -> None:
    # One H100 node per sharing kind: MPS quarters, time-slicing halves, whole GPUs.
    Node.objects.filter(cluster=world.cluster, name="h100-0").update(sharing=NodeSharing.MPS, sharing_replicas=4)
    for name, sharing, replicas in (("h100-1", NodeSharing.TIMESLICE, 2), ("h100-2", NodeSharing.EXCLUSIVE, None)):
        node_upsert(actor=None, cluster=world.cluster, name=name, cpu_millicores=128000, memory_mib=1048576,
                    gpus=[GpuSpec(index=i, model=H100, memory_mib=81920) for i in range(8)])
        Node.objects.filter(cluster=world.cluster, name=name).update(sharing=sharing, sharing_replicas=replicas)
    timeslice = Flavor.objects.create(
        name="h100-ts-2", display_name="half", gpu_model=world.h100.gpu_model, sharing_mode=SharingMode.TIMESLICE,
        resource_name="nvidia.com/gpu.shared", replicas=2, memory_mib=40960, compute_percent=50,
        gpu_equivalents=Decimal("0.5"),
    )
    grants = {
        "mps/4": granted(world, persona="nlp_member", project="llm", flavor="mps", quantity=5),
        "timeslice/2": granted(world, persona="vision_member", project="seg", flavor=timeslice, quantity=1),
        "exclusive": granted(world, persona="vision_member", project="seg", flavor="h100", quantity=2),
        "mig": granted(world, persona="nlp_member", project="llm", flavor="mig", quantity=3),
    }
    grants["exclusive a100"] = granted(world, persona="nlp_member", project="llm", flavor="a100", quantity=2)
    expected: dict[tuple[str, int], tuple[str, Decimal, list[Decimal]]] = {}
    for key, allocation in grants.items():
        for (node, index), rows in booked(allocation).items():
            assert (node, index) not in expected, "two sharing kinds on one GPU"
            shares = [Decimal(1) / 7 if row.mig_profile else Decimal(row.gpu_milli) / 1000 for row in rows]
            offsets = [Decimal(row.mig_start or 0) / 8 for row in rows if row.mig_profile]
            expected[(node, index)] = (key.split()[0], sum(shares, Decimal(0)), offsets)
    nodes = {node.name: node for node in gpu_map(cluster=world.cluster).nodes}
    for name, drawn in nodes.items():
        for gpu in drawn.gpus:
            mode, used, offsets = expected.get((name, gpu.index), (None, Decimal(0), []))
            assert (gpu.mode, round(gpu.used, 6)) == (mode, round(used, 6)), (name, gpu.index)
            if mode == "mig":
                assert sorted(segment.offset for segment in gpu.segments) == sorted(offsets)
    # Five MPS quarters on the MPS node only, each drawn with the share it was booked for: its
    # daemon's quarter plus the memory reserve (297 thousandths of an 80 GiB GPU), at most three on
    # one GPU. The half-GPU time-slicing unit likewise draws its 40 GiB plus the reserve.
    reserve = Reserve()
    mps_share = Decimal(reserve.unit_milli(81920, 20480, hard_cap_mib=20480)) / 1000
    assert {gpu.mode for gpu in nodes["h100-0"].gpus} <= {"mps/4", None}
    assert sum((gpu.used for gpu in nodes["h100-0"].gpus), Decimal(0)) == 5 * mps_share
    assert max(gpu.used for gpu in nodes["h100-0"].gpus) == 3 * mps_share <= 1
    assert [gpu.used for gpu in nodes["h100-1"].gpus if gpu.mode] == [Decimal(reserve.unit_milli(81920, 40960)) / 1000]
    assert sum(gpu.mode == "exclusive" for gpu in nodes["h100-2"].gpus) == 2
    assert unit_share(world.mig) == Decimal(1) / 7

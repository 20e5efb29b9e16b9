"""Platform admin pages: cluster health, the GPU map and the catalogue."""

from __future__ import annotations

import datetime
import re
from decimal import Decimal

import pytest
from django.utils import timezone

from allocations import services
from allocations.models import Allocation, Flavor, SharingMode
from clusters.models import Cluster, ClusterPush, PushState
from frontend.gpu_map import gpu_map, unit_share
from tests.conftest import World
from tests.frontend.conftest import Login, pending

pytestmark = pytest.mark.django_db


def granted(world: World, *, persona: str, project: str, flavor: str, quantity: int) -> Allocation:
    allocation = pending(world, persona=persona, project=project, flavor=flavor, quantity=quantity)
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
    assert "<td>3</td><td>24</td>" in rows["test-cluster"]  # nodes, GPUs


def test_it_draws_each_gpus_share_by_department(world: World, login: Login) -> None:
    granted(world, persona="nlp_member", project="llm", flavor="a100", quantity=2)
    granted(world, persona="nlp_member", project="llm", flavor="mig", quantity=3)
    granted(world, persona="vision_member", project="seg", flavor="h100", quantity=1)
    html = login("platform").get(f"/platform/clusters/{world.cluster.pk}/").content.decode()
    assert re.search(r"GPU 0: 100 % allocated \(#\d+ nlp: 1 × a100\); GPU 1: 100 % allocated", html)
    assert re.search(r"GPU 2: 43 % allocated \(#\d+ nlp: 3 × a100-1g\)", html)
    assert "vision: 1 × h100" in html
    assert html.count('class="mig-line"') == 6  # one GPU in MIG mode: seven slices
    assert "Delivery" in html and "project nlp-llm" in html  # the outbox rows of the approvals
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


def test_it_lays_units_out_without_mixing_sharing_kinds(world: World) -> None:
    start = timezone.now()
    replicas = Flavor.objects.create(
        name="h100-ts-2", display_name="half", gpu_model=world.h100.gpu_model, sharing_mode=SharingMode.TIMESLICE,
        resource_name="nvidia.com/gpu.shared", replicas=2, memory_mib=40960, compute_percent=50,
        gpu_equivalents=Decimal("0.5"),
    )
    for flavor, quantity in ((world.mps, 5), (replicas, 1), (world.h100, 6)):
        Allocation.objects.create(
            project=world.seg, flavor=flavor, quantity=quantity, priority_class=world.standard, cluster=world.cluster,
            starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="layout",
            requested_by=world.users["vision_member"], state="active",
        )
    h100_node = next(node for node in gpu_map(cluster=world.cluster).nodes if node.name.startswith("h100"))
    modes = [gpu.mode for gpu in h100_node.gpus]
    assert modes == ["exclusive"] * 6 + ["timeslice/2", "mps/4"]
    # Five quarter-GPU MPS units do not fit on the one GPU left for them: four are laid out.
    assert h100_node.gpus[7].used == 1 and h100_node.gpus[6].used == Decimal("0.5")
    assert unit_share(world.mig) == Decimal(1) / 7

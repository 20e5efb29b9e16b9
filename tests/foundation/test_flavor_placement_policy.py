"""A flavor's placement policy through the booking path (approval, preview), Volcano vGPU as a
flavor kind (its API checks, the nodes that offer it) and the re-push its scheduler needs.
Runs on SQLite and, with GPUPORTAL_REQUIRE_POSTGRES=1, on PostgreSQL."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, Flavor, PlacementPolicy, Quota, SharingMode
from clusters.models import ClusterPush, PushState
from kernel.errors import CapacityExceeded
from tests.conftest import H100, World

pytestmark = pytest.mark.django_db


def ask(world: World, *, flavor: Flavor, quantity: int) -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=flavor, quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1),
        justification="placement policy",
    )


def nodes_of(allocation: Allocation) -> list[str]:
    rows = allocation.reservations.filter(released_at__isnull=True).select_related("node").order_by("unit")
    return [row.node.name for row in rows]


def approve(world: World, allocation: Allocation) -> Allocation:
    return services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)


def test_a_spread_flavor_books_two_units_on_two_nodes_where_binpack_books_them_together(world: World) -> None:
    packed = approve(world, ask(world, flavor=world.a100, quantity=2))
    assert nodes_of(packed) == ["a100-0", "a100-0"]
    services.allocation_release(actor=world.users["nlp_member"], allocation_id=packed.pk)

    world.a100.placement_policy = PlacementPolicy.SPREAD
    world.a100.save(update_fields=["placement_policy"])
    spread = approve(world, ask(world, flavor=world.a100, quantity=2))
    assert nodes_of(spread) == ["a100-0", "a100-1"]
    assert set(spread.reservations.values_list("policy", flat=True)) == {"spread"}


def test_the_preview_shows_what_a_spread_flavor_would_book(world: World) -> None:
    world.a100.placement_policy = PlacementPolicy.SPREAD
    world.a100.save(update_fields=["placement_policy"])
    pending = ask(world, flavor=world.a100, quantity=2)
    preview = world.client("nlp_member").get(f"/api/v1/allocations/{pending.pk}/placement-preview/").json()
    assert sorted(preview["clusters"][0]["where"]) == ["a100-0", "a100-1"]


def vgpu_flavor(**overrides: Any) -> dict[str, Any]:
    return {"name": "h100-vgpu", "display_name": "H100 Volcano vGPU", "gpu_model": H100, "sharing_mode": "volcano-vgpu",
            "resource_name": "volcano.sh/vgpu-number", "memory_mib": 20480, "compute_percent": 25,
            "gpu_equivalents": "0.25", **overrides}


def test_the_flavor_api_takes_and_shows_a_volcano_vgpu_flavor_and_its_placement_policy(world: World) -> None:
    client = world.client("platform")
    created = client.post("/api/v1/flavors/", vgpu_flavor(placement_policy="spread"), format="json")
    assert created.status_code == 201, created.content
    assert (created.json()["sharing_mode"], created.json()["placement_policy"]) == ("volcano-vgpu", "spread")
    changed = client.patch(f"/api/v1/flavors/{created.json()['id']}/", {"placement_policy": "binpack"}, format="json")
    assert changed.status_code == 200 and changed.json()["placement_policy"] == "binpack"
    assert client.get(f"/api/v1/flavors/{world.a100.pk}/").json()["placement_policy"] == "binpack"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"resource_name": "nvidia.com/gpu"}, "resource_name"),
        ({"replicas": 4}, "replicas"),
        ({"mig_profile": "1g.10gb"}, "mig_profile"),
        ({"placement_policy": "random"}, "placement_policy"),
        ({"sharing_mode": "vgpu"}, "resource_name"),  # Volcano's resource on a HAMi flavor
    ],
)
def test_the_flavor_api_refuses_a_volcano_vgpu_flavor_volcano_would_not_serve(
    world: World, overrides: dict[str, Any], field: str
) -> None:
    response = world.client("platform").post("/api/v1/flavors/", vgpu_flavor(**overrides), format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["fields"]) == [field]
    assert not Flavor.objects.filter(name="h100-vgpu").exists()


def test_volcano_vgpu_shares_need_a_cluster_that_runs_volcano_and_exclusive_nodes(world: World) -> None:
    flavor = Flavor.objects.create(**{**vgpu_flavor(), "gpu_equivalents": Decimal("0.25"), "sharing_mode": SharingMode.VOLCANO_VGPU})
    Quota.objects.create(department=world.nlp, flavor=flavor, guaranteed=Decimal(0), limit=Decimal(8))
    allocation = ask(world, flavor=flavor, quantity=3)
    with pytest.raises(CapacityExceeded) as refusal:
        approve(world, allocation)
    assert "cluster test-cluster does not run Volcano, so it offers no Volcano vGPU shares" in refusal.value.message
    world.cluster.use_volcano = True
    world.cluster.save(update_fields=["use_volcano"])
    booked = approve(world, allocation)
    rows = list(booked.reservations.select_related("node"))
    # A quarter of the cores but 20 GiB: each unit is booked for its memory plus the memory reserve
    # (15 % + 200 MiB a unit) of the 80 GiB GPU, 297 thousandths.
    assert {row.node.name for row in rows} == {"h100-0"} and [row.gpu_milli for row in rows] == [297, 297, 297]


def test_changing_a_volcano_vgpu_flavors_policy_re_pushes_the_volcano_clusters_objects(world: World) -> None:
    world.cluster.use_volcano = True
    world.cluster.save(update_fields=["use_volcano"])
    client = world.client("platform")
    flavor_id = client.post("/api/v1/flavors/", vgpu_flavor(), format="json").json()["id"]
    pushes = ClusterPush.objects.filter(cluster=world.cluster, project__isnull=True)
    assert pushes.filter(state=PushState.PENDING).count() == 1
    pushes.update(state=PushState.DONE)

    client.patch(f"/api/v1/flavors/{flavor_id}/", {"display_name": "renamed"}, format="json")
    assert pushes.filter(state=PushState.PENDING).count() == 0  # the scheduler reads no name
    client.patch(f"/api/v1/flavors/{flavor_id}/", {"placement_policy": "spread"}, format="json")
    assert pushes.filter(state=PushState.PENDING).count() == 1
    pushes.update(state=PushState.DONE)
    client.patch(f"/api/v1/flavors/{world.a100.pk}/", {"placement_policy": "spread"}, format="json")
    assert pushes.filter(state=PushState.PENDING).count() == 0  # not a Volcano vGPU flavor


def test_the_gpu_map_draws_a_volcano_vgpu_unit_as_its_share_of_a_gpu(world: World) -> None:
    from frontend.gpu_map import unit_share

    flavor = Flavor(**{**vgpu_flavor(), "sharing_mode": SharingMode.VOLCANO_VGPU})
    assert unit_share(flavor) == Decimal("0.25")

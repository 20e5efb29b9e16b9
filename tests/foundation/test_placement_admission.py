"""Approval books concrete GPUs and MIG slices through the placement engine; releasing and
expiring free exactly what was booked; the refusal says why a request does not fit."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from allocations.booking.reservations import placement_workload, reservations_adopt, reservations_where
from allocations.booking.view import placement_view, unit_shape
from allocations.grants import services
from allocations.models import Allocation, AllocationState, Flavor, Quota, Reservation, SharingMode
from audit.models import AuditEvent
from clusters.inventory import GpuSpec, node_upsert
from clusters.models import Node, NodeSharing
from delivery import selectors as cluster_selectors
from delivery.node_configs import mig_config_entries
from kernel.errors import CapacityExceeded
from placement import Cluster as EngineCluster
from placement.mig import geometry_for_model
from tests.conftest import A100, H100, World, build_world

pytestmark = pytest.mark.django_db


def ask(world: World, *, flavor: Flavor, quantity: int = 1, project: str = "llm", persona: str = "nlp_member") -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users[persona], project=getattr(world, project), flavor=flavor, quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1),
        justification="placement",
    )


def approve(world: World, allocation: Allocation, persona: str = "nlp_admin") -> Allocation:
    return services.allocation_approve(actor=world.users[persona], allocation_id=allocation.pk)


def live(allocation: Allocation) -> list[Reservation]:
    return list(allocation.reservations.filter(released_at__isnull=True).select_related("node").order_by("unit"))


def engine_state(world: World, flavor: Flavor) -> dict[str, object]:
    view = placement_view(cluster=world.cluster, shape=unit_shape(flavor))
    assert view.engine is not None
    return view.engine.snapshot()


def test_approval_books_one_distinct_whole_gpu_per_unit_and_records_where_in_the_audit_event(world: World) -> None:
    allocation = approve(world, ask(world, flavor=world.a100, quantity=3))
    rows = live(allocation)
    assert [row.unit for row in rows] == [0, 1, 2]
    gpus = {(row.node.name, tuple(row.gpu_indices)) for row in rows}
    assert len(gpus) == 3 and all(row.gpu_milli == 1000 and row.node.name.startswith("a100-") for row in rows)
    assert all(row.cpu_millicores == 8000 and row.memory_mib == 65536 for row in rows)
    event = AuditEvent.objects.filter(action="allocation.approved").get()
    placement = event.details["placement"]
    assert sorted((node, label) for node, labels in placement.items() for label in labels) == sorted(
        (node, f"gpu{gpus_[0]}") for node, gpus_ in gpus
    )


def test_whole_gpus_are_packed_onto_one_node_before_a_second_is_opened(world: World) -> None:
    first = approve(world, ask(world, flavor=world.a100, quantity=2))
    second = approve(world, ask(world, flavor=world.a100, quantity=2))
    nodes = {row.node.name for row in live(first) + live(second)}
    assert len(nodes) == 1  # the other A100 node stays whole for 8-GPU work and MIG


def test_mig_units_are_carved_at_legal_starts_and_packed_on_a_carved_gpu(world: World) -> None:
    allocation = approve(world, ask(world, flavor=world.mig, quantity=3))
    rows = live(allocation)
    geometry = geometry_for_model(A100, 81920)
    assert geometry is not None
    legal = set(geometry.profile("1g.10gb").starts)
    assert {(row.node.name, tuple(row.gpu_indices)) for row in rows} == {(rows[0].node.name, tuple(rows[0].gpu_indices))}
    starts = sorted(row.mig_start for row in rows if row.mig_start is not None)
    assert len(set(starts)) == 3 and set(starts) <= legal
    assert all(row.mig_profile == "1g.10gb" and row.gpu_milli == 0 for row in rows)


def test_large_slices_share_a_gpu_so_whole_gpus_stay_free(world: World) -> None:
    half = Flavor.objects.create(
        name="a100-3g", display_name="3g", gpu_model=A100, sharing_mode=SharingMode.MIG, mig_profile="3g.40gb",
        resource_name="nvidia.com/mig-3g.40gb", memory_mib=40192, compute_percent=42,
        gpu_equivalents=Decimal("0.4286"), cpu_millicores_per_unit=4000, memory_mib_per_unit=32768,
    )
    rows = live(approve(world, ask(world, flavor=half, quantity=4)))
    # Two 3g.40gb fit one A100-80GB (starts 0 and 4): four take two GPUs, not four, because the
    # catalogue also offers whole A100s and the policy keeps room for them.
    assert len({(row.node.name, tuple(row.gpu_indices)) for row in rows}) == 2
    assert sorted(row.mig_start for row in rows if row.mig_start is not None) == [0, 0, 4, 4]


def test_the_rendered_mig_parted_layout_is_the_one_the_engine_booked(world: World) -> None:
    mig = approve(world, ask(world, flavor=world.mig, quantity=2))
    whole = approve(world, ask(world, flavor=world.a100, quantity=1))
    carved = live(mig)[0]
    uncarved = live(whole)[0]
    plans = {plan.name: plan for plan in cluster_selectors.node_plans(cluster=world.cluster)}
    entries = mig_config_entries(plans[carved.node.name])
    assert {"devices": carved.gpu_indices, "mig-enabled": True, "mig-devices": {"1g.10gb": 2}} in entries
    whole_entries = mig_config_entries(plans[uncarved.node.name])
    assert {"devices": uncarved.gpu_indices, "mig-enabled": False} in whole_entries


def test_releasing_frees_exactly_what_was_booked_and_keeps_the_rows_as_history(world: World) -> None:
    approve(world, ask(world, flavor=world.mig, quantity=2))
    before = engine_state(world, world.mig)
    held = approve(world, ask(world, flavor=world.mig, quantity=4))
    assert engine_state(world, world.mig) != before
    services.allocation_release(actor=world.users["nlp_member"], allocation_id=held.pk)
    assert engine_state(world, world.mig) == before
    rows = Reservation.objects.filter(allocation=held)
    assert rows.count() == 4 and all(row.released_at and row.release_reason == "released" for row in rows)


def test_expiry_frees_the_gpus(world: World) -> None:
    held = approve(world, ask(world, flavor=world.a100, quantity=2))
    services.allocations_expire(now=held.ends_at + datetime.timedelta(seconds=1))
    assert not live(held)
    assert set(Reservation.objects.filter(allocation=held).values_list("release_reason", flat=True)) == {"expired"}


def test_a_slice_that_fits_in_total_but_not_at_a_legal_start_is_refused_with_the_engines_reason() -> None:
    world = build_world(a100_gpus=1)
    half = Flavor.objects.create(
        name="a100-3g", display_name="3g", gpu_model=A100, sharing_mode=SharingMode.MIG, mig_profile="3g.40gb",
        resource_name="nvidia.com/mig-3g.40gb", memory_mib=40192, compute_percent=42, gpu_equivalents=Decimal("0.4286"),
        cpu_millicores_per_unit=1000, memory_mib_per_unit=1024,
    )
    holder = Allocation.objects.create(
        project=world.llm, flavor=world.mig, quantity=4, priority_class=world.standard, cluster=world.cluster,
        starts_at=timezone.now(), ends_at=timezone.now() + datetime.timedelta(days=1), justification="x",
        requested_by=world.users["nlp_member"], state=AllocationState.ACTIVE,
    )
    node = Node.objects.get(name="a100-0")
    for unit, start in enumerate((0, 2, 4, 6)):  # four 1g.10gb slices spread over the memory slices
        Reservation.objects.create(allocation=holder, unit=unit, node=node, gpu_indices=[0], gpu_milli=0,
                                   mig_profile="1g.10gb", mig_start=start, cpu_millicores=2000, memory_mib=16384)
    with pytest.raises(CapacityExceeded) as refusal:
        approve(world, ask(world, flavor=half))
    assert refusal.value.details["kind"] == "mig-slice"
    assert refusal.value.message == (
        "No room for 1 × a100-3g on cluster test-cluster: no NVIDIA-A100-SXM4-80GB has a free, legally placed "
        "3g.40gb slot; the most free compute is 3/7 slices on node a100-0 (GPU 0), not at a legal start."
    )


def test_cpu_is_booked_too_and_a_full_node_refuses_with_the_numbers(world: World) -> None:
    Node.objects.filter(cluster=world.cluster).update(cpu_millicores=16000)  # two 8-core units per node
    approve(world, ask(world, flavor=world.a100, quantity=4))
    with pytest.raises(CapacityExceeded) as refusal:
        approve(world, ask(world, flavor=world.a100, quantity=1))
    assert refusal.value.details["kind"] == "cpu-or-memory"
    assert "8 cores" in refusal.value.message and "the most free is 0 cores" in refusal.value.message


def test_a_node_with_unknown_cpu_and_memory_is_not_limited_by_them(world: World) -> None:
    Node.objects.filter(cluster=world.cluster).update(cpu_millicores=0, memory_mib=0)
    allocation = approve(world, ask(world, flavor=world.a100, quantity=8))
    assert len(live(allocation)) == 8


def test_replica_flavors_go_only_to_nodes_configured_with_that_many_replicas(world: World) -> None:
    ask_mps = ask(world, flavor=world.mps, quantity=5, project="seg", persona="vision_member")
    with pytest.raises(CapacityExceeded) as refusal:
        approve(world, ask_mps, persona="vision_admin")
    assert refusal.value.message == (
        "No room for 5 × h100-mps on cluster test-cluster: no schedulable node of cluster test-cluster offers "
        f"{H100} mps replicas (4 per GPU)."
    )
    Node.objects.filter(name="h100-0").update(sharing=NodeSharing.MPS, sharing_replicas=4)
    Quota.objects.create(department=world.vision, flavor=world.mps, guaranteed=Decimal(0), limit=Decimal(8))
    rows = live(approve(world, ask_mps, persona="vision_admin"))
    per_gpu: dict[int, int] = {}
    for row in rows:
        # The daemon pins each of 4 replicas to a quarter of the 80 GiB; with the reserve (15 % +
        # 200 MiB a unit) three fit one GPU: 297 thousandths each, the fourth replica stays free.
        assert row.gpu_milli == 297
        per_gpu[row.gpu_indices[0]] = per_gpu.get(row.gpu_indices[0], 0) + 1
    assert sorted(per_gpu.values()) == [2, 3]  # a unit fills one GPU before starting another


def test_vgpu_shares_need_a_cluster_that_runs_hami(world: World) -> None:
    vgpu = Flavor.objects.create(
        name="h100-vgpu", display_name="vGPU", gpu_model=H100, sharing_mode=SharingMode.VGPU,
        resource_name="nvidia.com/gpu", memory_mib=16384, compute_percent=30, gpu_equivalents=Decimal("0.3"),
    )
    allocation = ask(world, flavor=vgpu, quantity=3, project="seg", persona="vision_member")
    with pytest.raises(CapacityExceeded) as refusal:
        approve(world, allocation, persona="vision_admin")
    assert "does not run HAMi" in refusal.value.message
    world.cluster.use_hami = True
    world.cluster.save()
    rows = live(approve(world, allocation, persona="vision_admin"))
    assert [row.gpu_milli for row in rows] == [300, 300, 300]
    per_gpu: dict[int, int] = {}
    for row in rows:
        per_gpu[row.gpu_indices[0]] = per_gpu.get(row.gpu_indices[0], 0) + row.gpu_milli
    assert all(total <= 1000 for total in per_gpu.values())


def test_a_pinned_layout_is_claimed_instance_by_instance_and_never_replanned(world: World) -> None:
    Node.objects.filter(name="a100-1").update(mig_layout=[{"devices": [0], "mig-devices": {"1g.10gb": 2}}])
    Node.objects.filter(name="a100-0").update(is_schedulable=False)
    rows = live(approve(world, ask(world, flavor=world.mig, quantity=2)))
    assert {(row.node.name, tuple(row.gpu_indices), row.policy) for row in rows} == {("a100-1", (0,), "pinned-layout")}
    assert sorted(row.mig_start for row in rows if row.mig_start is not None) == [0, 1]
    with pytest.raises(CapacityExceeded) as refusal:
        approve(world, ask(world, flavor=world.mig, quantity=1))
    assert "pinned on cluster test-cluster hold no free 1g.10gb" in refusal.value.message
    # Whole GPUs are not taken from a node whose layout is pinned.
    with pytest.raises(CapacityExceeded):
        approve(world, ask(world, flavor=world.a100, quantity=1))


def test_allocations_granted_before_placement_are_booked_by_the_next_approval_and_audited(world: World) -> None:
    start = timezone.now()
    legacy = Allocation.objects.create(
        project=world.llm, flavor=world.a100, quantity=7, priority_class=world.standard, cluster=world.cluster,
        starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="legacy",
        requested_by=world.users["nlp_member"], state=AllocationState.ACTIVE,
    )
    fresh = approve(world, ask(world, flavor=world.a100, quantity=1))
    assert len(live(legacy)) == 7
    taken = {(row.node.name, tuple(row.gpu_indices)) for row in live(legacy)}
    assert (live(fresh)[0].node.name, tuple(live(fresh)[0].gpu_indices)) not in taken
    event = AuditEvent.objects.get(action="allocation.placed")
    assert event.details["why"] == "granted before GPU placement"
    assert reservations_adopt(cluster=world.cluster, workload=placement_workload(), actor=None) == 0


def test_the_api_shows_where_each_unit_is_booked_and_why_a_refusal_does_not_fit(world: World) -> None:
    client = APIClient()
    client.force_authenticate(world.users["nlp_admin"])
    allocation = ask(world, flavor=world.mig, quantity=2)
    response = client.post(f"/api/v1/allocations/{allocation.pk}/approve/", {"comment": "ok"}, format="json")
    assert response.status_code == 200, response.content
    placement = response.json()["placement"]
    assert [unit["unit"] for unit in placement] == [0, 1]
    assert {unit["mig_profile"] for unit in placement} == {"1g.10gb"} and all(unit["share_milli"] == 0 for unit in placement)
    listed = client.get("/api/v1/allocations/", {"state": "approved"}).json()["results"]
    assert listed[0]["placement"] == placement
    too_big = ask(world, flavor=world.a100, quantity=16, persona="nlp_member")
    Quota.objects.filter(department=world.nlp).update(limit=Decimal(100))
    Quota.objects.filter(department=world.acme).update(limit=Decimal(100))
    response = client.post(f"/api/v1/allocations/{too_big.pk}/approve/", {"comment": "ok"}, format="json")
    assert response.status_code == 409
    body = response.json()["error"]
    assert body["code"] == "capacity_exceeded"
    assert "fully free" in body["details"]["reason"] and body["details"]["reason"] in body["message"]


def test_the_engine_view_counts_only_live_reservations(world: World) -> None:
    held = approve(world, ask(world, flavor=world.a100, quantity=8))
    view = placement_view(cluster=world.cluster, shape=unit_shape(world.a100))
    assert isinstance(view.engine, EngineCluster)
    assert view.engine.allocated_milli() == 8000
    services.allocation_release(actor=world.users["nlp_admin"], allocation_id=held.pk)
    view = placement_view(cluster=world.cluster, shape=unit_shape(world.a100))
    assert view.engine is not None and view.engine.allocated_milli() == 0


def test_a_node_added_to_the_cluster_is_used_at_the_next_approval(world: World) -> None:
    node_upsert(actor=None, cluster=world.cluster, name="h100-1", cpu_millicores=64000, memory_mib=524288,
                gpus=[GpuSpec(index=i, model=H100, memory_mib=81920) for i in range(2)])
    approve(world, ask(world, flavor=world.h100, quantity=8, project="seg", persona="vision_member"), persona="vision_admin")
    extra = ask(world, flavor=world.h100, quantity=1, project="seg", persona="vision_member")
    Quota.objects.filter(department=world.vision).update(limit=Decimal(20))
    rows = live(approve(world, extra, persona="vision_admin"))
    assert rows[0].node.name == "h100-1"


def test_a_node_holding_reservations_cannot_change_how_it_offers_its_gpus(world: World) -> None:
    from django.core.exceptions import ValidationError

    booked = live(approve(world, ask(world, flavor=world.mig, quantity=1)))[0].node
    booked.sharing = NodeSharing.EXCLUSIVE
    with pytest.raises(ValidationError) as refusal:
        booked.full_clean()
    assert "holds 1 live GPU reservations" in refusal.value.message_dict["sharing"][0]
    idle = Node.objects.get(name="h100-0")
    idle.sharing, idle.sharing_replicas = NodeSharing.MPS, 4
    idle.full_clean()  # nothing booked there: allowed


def test_the_api_previews_where_a_pending_allocation_would_go_or_why_it_cannot(world: World) -> None:
    client = APIClient()
    client.force_authenticate(world.users["nlp_member"])
    fitting = ask(world, flavor=world.a100, quantity=2)
    preview = client.get(f"/api/v1/allocations/{fitting.pk}/placement-preview/").json()
    assert preview["fits"] is True and [line["cluster"] for line in preview["clusters"]] == ["test-cluster"]
    where = preview["clusters"][0]["where"]
    assert sum(len(gpus) for gpus in where.values()) == 2
    booked = approve(world, fitting)
    # Nothing changed in between: approval books what the preview showed.
    assert {node: sorted(gpus) for node, gpus in where.items()} == {
        node: sorted(gpus) for node, gpus in reservations_where(allocation=booked).items()
    }
    mps = ask(world, flavor=world.mps, quantity=1, project="seg", persona="vision_member")
    client.force_authenticate(world.users["vision_member"])
    [line] = client.get(f"/api/v1/allocations/{mps.pk}/placement-preview/").json()["clusters"]
    assert line["fits"] is False and line["kind"] == "not-offered" and "mps replicas (4 per GPU)" in line["reason"]
    response = client.get(f"/api/v1/allocations/{booked.pk}/placement-preview/")
    assert response.status_code == 404  # another department's allocation: not visible
    client.force_authenticate(world.users["nlp_member"])
    response = client.get(f"/api/v1/allocations/{booked.pk}/placement-preview/")
    assert response.status_code == 409 and "only a pending allocation has a preview" in response.json()["error"]["message"]


def test_a_booked_gpu_leaving_the_inventory_does_not_stop_the_cluster_rendering(world: World) -> None:
    from delivery.services import cluster_scope

    Node.objects.filter(name="a100-1").update(is_schedulable=False)
    rows = live(approve(world, ask(world, flavor=world.mig, quantity=8)))  # 7 on one GPU, 1 on the next
    node = rows[0].node
    highest = max(row.gpu_indices[0] for row in rows)
    node.gpus.filter(index__gte=highest).delete()  # the card that holds the eighth slice is gone
    objects = cluster_scope(cluster=world.cluster).objects
    labels = next(obj for obj in objects if obj["kind"] == "Node" and obj["metadata"]["name"] == node.name)
    assert labels["metadata"]["labels"]["nvidia.com/device-plugin.config"] == "mig-mixed"

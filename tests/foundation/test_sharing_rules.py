"""Safe sharing at placement: the memory reserve on shared GPUs, one department per MPS node, and
dedicated pools, proved on the booking path (approval) and as properties of any sequence of
approvals; and flavors whose units cannot fit with the reserve are refused."""

from __future__ import annotations

import datetime
from collections import defaultdict
from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocations.booking.sharing import flavor_reserve, mps_hard_cap_mib
from allocations.grants import services
from allocations.models import Allocation, Flavor, Quota, Reservation, SharingMode
from audit.models import AuditEvent
from clusters.models import Gpu, Node, NodeSharing
from kernel.errors import ApplicationError, CapacityExceeded
from placement.reserve import GPU_MILLI, Reserve
from tenants.models import Isolation, Project
from tests.conftest import H100, World, build_world

pytestmark = pytest.mark.django_db


def ask(world: World, *, flavor: Flavor, project: Project, persona: str, quantity: int = 1) -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users[persona], project=project, flavor=flavor, quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1),
        justification="sharing rules",
    )


def grant(world: World, *, flavor: Flavor, department: str, quantity: int = 1) -> Allocation:
    project = world.llm if department == "nlp" else world.seg
    allocation = ask(world, flavor=flavor, project=project, persona=f"{department}_member", quantity=quantity)
    return services.allocation_approve(actor=world.users[f"{department}_admin"], allocation_id=allocation.pk)


def vgpu_flavor(name: str = "h100-vgpu", memory: int = 16384, share: str = "0.2") -> Flavor:
    return Flavor.objects.create(
        name=name, display_name="vGPU", gpu_model=H100, sharing_mode=SharingMode.VGPU, resource_name="nvidia.com/gpu",
        memory_mib=memory, compute_percent=20, gpu_equivalents=Decimal(share), cpu_millicores_per_unit=2000,
        memory_mib_per_unit=16384,
    )


def sharing_world(*, mps_nodes: int = 2, hami_nodes: int = 2) -> World:
    world = build_world(h100_gpus=8 * (mps_nodes + hami_nodes))
    names = sorted(Node.objects.filter(name__startswith="h100-").values_list("name", flat=True))
    Node.objects.filter(name__in=names[:mps_nodes]).update(sharing=NodeSharing.MPS, sharing_replicas=4)
    world.cluster.use_hami = True
    world.cluster.save()
    # Small host shares, so GPUs (not the nodes' CPUs) are what runs out.
    Flavor.objects.filter(name="h100-mps").update(cpu_millicores_per_unit=2000, memory_mib_per_unit=16384)
    world.mps.refresh_from_db()
    for department in (world.nlp, world.vision):
        for flavor in Flavor.objects.all():
            Quota.objects.update_or_create(department=department, flavor=flavor,
                                           defaults={"guaranteed": Decimal(0), "limit": Decimal(64)})
        Quota.objects.update_or_create(department=department, flavor=None,
                                       defaults={"guaranteed": Decimal(0), "limit": Decimal(64)})
    Quota.objects.update_or_create(department=world.acme, flavor=None,
                                   defaults={"guaranteed": Decimal(0), "limit": Decimal(128)})
    return world


@pytest.fixture
def shared(db: None) -> World:
    world = sharing_world()
    vgpu_flavor()
    return world


def live_rows() -> list[Reservation]:
    return list(Reservation.objects.filter(released_at__isnull=True)
                .select_related("node", "node__cluster", "allocation__flavor", "allocation__project__department"))


def assert_sharing_invariants() -> None:
    """What must hold after any sequence of approvals."""
    memory = {(gpu.node_id, gpu.index): gpu.memory_mib for gpu in Gpu.objects.all()}
    per_gpu: dict[tuple[int, int], list[Reservation]] = defaultdict(list)
    per_node: dict[int, list[Reservation]] = defaultdict(list)
    for row in live_rows():
        per_node[row.node_id].append(row)
        for index in row.gpu_indices:
            per_gpu[(row.node_id, int(index))].append(row)
    for key, rows in per_gpu.items():
        shared_rows = [row for row in rows if row.allocation.flavor.sharing_mode != SharingMode.EXCLUSIVE]
        if shared_rows:
            total = memory[key]
            # Every unit's memory (its MPS daemon's cap where larger) plus the per-unit reserve, as a
            # share of what the reserve leaves usable under that unit's own reserve: at most the GPU.
            used = sum(
                Decimal(max(row.allocation.flavor.memory_mib,
                            mps_hard_cap_mib(flavor=row.allocation.flavor, gpu_memory_mib=total))
                        + flavor_reserve(flavor=row.allocation.flavor, cluster=row.node.cluster).per_unit_mib)
                / flavor_reserve(flavor=row.allocation.flavor, cluster=row.node.cluster).usable_mib(total)
                for row in shared_rows
            )
            assert used <= 1, f"GPU {key} books more than its memory minus the reserve"
            assert sum(row.gpu_milli for row in rows) <= GPU_MILLI
    for rows in per_node.values():
        node = rows[0].node
        departments = {row.allocation.project.department_id for row in rows}
        if node.sharing == NodeSharing.MPS:
            assert len(departments) == 1, f"MPS node {node.name} serves {len(departments)} departments"
    for row in live_rows():
        project = row.allocation.project
        isolation = project.department.isolation
        if isolation == Isolation.SHARED:
            continue
        together = per_node[row.node_id] if isolation == Isolation.DEDICATED_NODES else [
            other for index in row.gpu_indices for other in per_gpu[(row.node_id, int(index))]
        ]
        assert {other.allocation.project.department_id for other in together} == {project.department_id}, (
            f"dedicated {project.department.slug} shares {row.node.name}"
        )


# ----------------------------------------------------------------------------- the reserve, pure


@settings(max_examples=300, deadline=None)
@given(
    gpu_memory=st.integers(1024, 200_000),
    percent=st.integers(0, 90),
    per_unit=st.integers(0, 4096),
    units=st.lists(st.integers(1, 100_000), min_size=1, max_size=64),
)
def test_units_whose_booked_milli_fit_a_gpu_always_fit_its_memory_minus_the_reserve(
    gpu_memory: int, percent: int, per_unit: int, units: list[int]
) -> None:
    reserve = Reserve(percent=percent, per_unit_mib=per_unit)
    booked: list[int] = []
    milli_used = 0
    for memory in units:
        milli = reserve.unit_milli(gpu_memory, memory)
        if milli_used + milli <= GPU_MILLI:  # what the engine would still book on this GPU
            booked.append(memory)
            milli_used += milli
    assert sum(booked) + reserve.total_mib(gpu_memory, len(booked)) <= gpu_memory
    for memory in booked:
        assert memory <= reserve.largest_unit_mib(gpu_memory, 1)


def test_an_mps_unit_is_booked_for_its_daemons_cap_so_the_pinned_caps_leave_the_reserve_free() -> None:
    reserve = Reserve()
    # 4 replicas of an 80 GiB GPU: the daemon pins each to 20 GiB; 4 × 20 GiB would leave nothing.
    assert reserve.units_per_gpu(81920, 16384, hard_cap_mib=20480) == 3
    # 5 replicas pinned to 16 GiB each: 4 are booked, 64 GiB pinned at most, 16 GiB (20 %) left free.
    assert reserve.units_per_gpu(81920, 16384, hard_cap_mib=16384) == 4
    assert 4 * 16384 + reserve.total_mib(81920, 4) <= 81920


# ----------------------------------------------------------------------------- booking


def test_mps_units_of_two_departments_go_to_different_nodes_and_the_refusal_names_the_other_tenant(shared: World) -> None:
    nlp = grant(shared, flavor=shared.mps, department="nlp")
    vision = grant(shared, flavor=shared.mps, department="vision")
    nlp_node = {row.node.name for row in nlp.reservations.select_related("node")}
    vision_node = {row.node.name for row in vision.reservations.select_related("node")}
    assert len(nlp_node) == 1 and len(vision_node) == 1 and nlp_node != vision_node
    # Each MPS node now serves its department; more nlp units fill nlp's node (3 a GPU under the
    # reserve: 24) and never spill onto vision's.
    more = grant(shared, flavor=shared.mps, department="nlp", quantity=23)
    assert {row.node.name for row in more.reservations.select_related("node")} == nlp_node
    with pytest.raises(CapacityExceeded) as refusal:
        grant(shared, flavor=shared.mps, department="nlp")
    assert f"{sorted(vision_node)[0]}: its MPS daemon serves department vision" in refusal.value.message
    assert_sharing_invariants()


def test_a_dedicated_department_never_shares_a_gpu_and_others_keep_off_its_gpus(shared: World) -> None:
    vgpu = Flavor.objects.get(name="h100-vgpu")
    nlp = grant(shared, flavor=vgpu, department="nlp")
    shared.vision.isolation = Isolation.DEDICATED_GPUS
    shared.vision.save()
    vision = grant(shared, flavor=vgpu, department="vision", quantity=2)
    nlp_gpus = {(row.node_id, tuple(row.gpu_indices)) for row in nlp.reservations.all()}
    vision_gpus = {(row.node_id, tuple(row.gpu_indices)) for row in vision.reservations.all()}
    assert not nlp_gpus & vision_gpus
    later = grant(shared, flavor=vgpu, department="nlp", quantity=4)
    assert not {(row.node_id, tuple(row.gpu_indices)) for row in later.reservations.all()} & vision_gpus
    assert_sharing_invariants()


def test_a_department_dedicated_to_its_nodes_shares_no_node_with_anyone(shared: World) -> None:
    shared.vision.isolation = Isolation.DEDICATED_NODES
    shared.vision.save()
    vgpu = Flavor.objects.get(name="h100-vgpu")
    vision = grant(shared, flavor=shared.h100, department="vision")
    (vision_node,) = {row.node_id for row in vision.reservations.all()}
    nlp = grant(shared, flavor=vgpu, department="nlp", quantity=3)
    assert vision_node not in {row.node_id for row in nlp.reservations.all()}
    assert_sharing_invariants()


def test_a_dedicated_project_keeps_apart_from_its_own_departments_other_projects(shared: World) -> None:
    vgpu = Flavor.objects.get(name="h100-vgpu")
    shared.llm.isolation = Isolation.DEDICATED_GPUS
    shared.llm.save()
    speech = services.allocation_approve(
        actor=shared.users["nlp_admin"],
        allocation_id=ask(shared, flavor=vgpu, project=shared.speech_project, persona="speech_member").pk,
    )
    llm = grant(shared, flavor=vgpu, department="nlp", quantity=3)
    assert not ({(row.node_id, tuple(row.gpu_indices)) for row in speech.reservations.all()}
                & {(row.node_id, tuple(row.gpu_indices)) for row in llm.reservations.all()})


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    isolation=st.sampled_from([Isolation.SHARED, Isolation.DEDICATED_GPUS, Isolation.DEDICATED_NODES]),
    asks=st.lists(
        st.tuples(st.sampled_from(["nlp", "vision"]), st.sampled_from(["h100-mps", "h100-vgpu", "h100-vgpu-big", "h100"]),
                  st.integers(1, 6), st.booleans()),
        min_size=1, max_size=10,
    ),
)
def test_no_sequence_of_approvals_and_releases_breaks_the_reserve_mps_tenancy_or_a_dedicated_pool(
    db: None, isolation: str, asks: list[tuple[str, str, int, bool]]
) -> None:
    with transaction.atomic():
        world = sharing_world(mps_nodes=1, hami_nodes=2)
        vgpu_flavor()
        vgpu_flavor("h100-vgpu-big", memory=40960, share="0.5")
        world.vision.isolation = isolation
        world.vision.save()
        granted: list[Allocation] = []
        for department, flavor_name, quantity, release in asks:
            try:
                granted.append(grant(world, flavor=Flavor.objects.get(name=flavor_name), department=department,
                                     quantity=quantity))
            except (CapacityExceeded, ApplicationError):
                pass
            if release and granted:
                done = granted.pop(0)
                services.allocation_release(actor=world.users[f"{done.project.department.slug}_member"],
                                            allocation_id=done.pk)
            assert_sharing_invariants()
        transaction.set_rollback(True)


# ----------------------------------------------------------------------------- flavors


def flavor_body(**changes: object) -> dict[str, object]:
    body: dict[str, object] = {
        "name": "h100-mps-new", "display_name": "MPS", "gpu_model": H100, "sharing_mode": "mps",
        "resource_name": "nvidia.com/gpu.shared", "replicas": 4, "memory_mib": 81920, "compute_percent": 25,
        "gpu_equivalents": "0.25",
    }
    body.update(changes)
    return body


def test_a_flavor_breaking_the_reserve_is_refused_naming_memory_mib_with_the_numbers(world: World) -> None:
    client = world.client("platform")
    response = client.post("/api/v1/flavors/", flavor_body(), format="json")
    assert response.status_code == 400, response.content
    body = response.json()["error"]
    assert "memory_mib" in body["fields"]
    assert body["details"] == {
        "cluster": "test-cluster", "gpu_memory_mib": 81920, "reserve_percent": 15, "reserve_per_unit_mib": 200,
        "reserve_mib": 12488, "units_counted": 1, "max_memory_mib": 20480,
    }
    assert "pins each of 4 replicas to 20480 MiB" in body["fields"]["memory_mib"][0]
    response = client.post("/api/v1/flavors/", flavor_body(sharing_mode="timeslice", memory_mib=40960, replicas=2,
                                                           compute_percent=50, gpu_equivalents="0.5"), format="json")
    assert response.status_code == 400
    assert response.json()["error"]["details"]["max_memory_mib"] == (81920 - 12288) // 2 - 200
    assert not Flavor.objects.filter(name="h100-mps-new").exists()
    response = client.post("/api/v1/flavors/", flavor_body(replicas=5, memory_mib=16384, compute_percent=20),
                           format="json")
    assert response.status_code == 201, response.content


def test_a_flavors_own_reserve_overrides_the_clusters(world: World) -> None:
    client = world.client("platform")
    body = flavor_body(sharing_mode="timeslice", memory_mib=40960, replicas=2, compute_percent=50,
                       gpu_equivalents="0.5", reserve_percent=0, reserve_per_unit_mib=0)
    response = client.post("/api/v1/flavors/", body, format="json")
    assert response.status_code == 201, response.content
    flavor = Flavor.objects.get(name="h100-mps-new")
    assert flavor_reserve(flavor=flavor, cluster=world.cluster) == Reserve(percent=0, per_unit_mib=0)
    response = client.patch(f"/api/v1/flavors/{flavor.pk}/", {"reserve_per_unit_mib": 1}, format="json")
    assert response.status_code == 400 and "memory_mib" in response.json()["error"]["fields"]


# ----------------------------------------------------------------------------- isolation through the API


def test_a_platform_admin_marks_a_department_dedicated_through_the_api_and_new_bookings_follow(shared: World) -> None:
    vgpu = Flavor.objects.get(name="h100-vgpu")
    nlp = grant(shared, flavor=vgpu, department="nlp")
    client = shared.client("platform")
    response = client.patch(f"/api/v1/departments/{shared.vision.pk}/", {"isolation": "dedicated-nodes"}, format="json")
    assert response.status_code == 200 and response.json()["isolation"] == "dedicated-nodes"
    event = AuditEvent.objects.filter(action="department.updated").get()
    assert (event.before, event.after) == ({"isolation": "shared"}, {"isolation": "dedicated-nodes"})
    vision = grant(shared, flavor=vgpu, department="vision")
    assert not {row.node_id for row in vision.reservations.all()} & {row.node_id for row in nlp.reservations.all()}
    bad = client.patch(f"/api/v1/projects/{shared.seg.pk}/", {"isolation": "private"}, format="json")
    assert bad.status_code == 400 and list(bad.json()["error"]["fields"]) == ["isolation"]
    assert shared.client("vision_admin").patch(
        f"/api/v1/departments/{shared.vision.pk}/", {"isolation": "shared"}, format="json"
    ).status_code == 403
    shared.vision.refresh_from_db()
    assert shared.vision.isolation == Isolation.DEDICATED_NODES


def test_the_gpu_map_shows_the_mps_tenant_and_the_dedicated_pools(shared: World) -> None:
    from frontend.gpu_map import gpu_map

    shared.vision.isolation = Isolation.DEDICATED_GPUS
    shared.vision.save()
    grant(shared, flavor=shared.mps, department="nlp")
    vision = grant(shared, flavor=Flavor.objects.get(name="h100-vgpu"), department="vision")
    pools = {node.name: node.pools for node in gpu_map(cluster=shared.cluster).nodes}
    mps_node = Reservation.objects.filter(allocation__project=shared.llm).values_list("node__name", flat=True).first()
    assert pools[str(mps_node)] == ("MPS serves nlp",)
    (vision_node,) = {row.node.name for row in vision.reservations.select_related("node")}
    assert pools[vision_node] == ("vision: dedicated GPUs",)
    assert all(not captions for name, captions in pools.items() if name not in {mps_node, vision_node})

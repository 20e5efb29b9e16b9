"""The sharing settings through the API: PATCH /api/v1/clusters/{id}/ (use_hami, use_volcano, the
memory reserve) and PATCH /api/v1/nodes/{id}/ (sharing, replicas, MIG layout, schedulable), for
platform admins only; bad values are a 400 naming the field, changes under live bookings a 409;
every change is audited with before and after, and what changes the cluster's objects is pushed."""

from __future__ import annotations

import datetime
import json
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, Flavor, Reservation, SharingMode
from audit.models import AuditEvent
from clusters.models import Cluster, ClusterPush, Node, NodeSharing
from tests.conftest import H100, World

pytestmark = pytest.mark.django_db


def patch_cluster(world: World, persona: str, body: dict[str, Any]) -> Any:
    return world.client(persona).patch(f"/api/v1/clusters/{world.cluster.pk}/", body, format="json")


def patch_node(world: World, persona: str, node: Node, body: dict[str, Any]) -> Any:
    return world.client(persona).patch(f"/api/v1/nodes/{node.pk}/", body, format="json")


def node(name: str) -> Node:
    return Node.objects.get(name=name)


def ask(world: World, flavor: Flavor, *, project: str = "llm", persona: str = "nlp_member") -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users[persona], project=getattr(world, project), flavor=flavor, quantity=1,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="x",
    )


def granted(world: World, flavor: Flavor, *, project: str = "llm", persona: str = "nlp_member", approver: str = "nlp_admin") -> Allocation:
    return services.allocation_approve(actor=world.users[approver], allocation_id=ask(world, flavor, project=project, persona=persona).pk)


def vgpu_flavor(mode: str = SharingMode.VGPU) -> Flavor:
    return Flavor.objects.create(
        name=f"h100-{mode}", display_name="vGPU", gpu_model=H100, sharing_mode=mode, resource_name="nvidia.com/gpu",
        memory_mib=16384, compute_percent=30, gpu_equivalents=Decimal("0.3"),
    )


def last_event(action: str) -> dict[str, Any]:
    event = AuditEvent.objects.filter(action=action).order_by("-seq").first()
    assert event is not None
    return dict(json.loads(event.record))


# ------------------------------------------------------------------------------ cluster settings


def test_turning_hami_on_is_audited_and_pushes_the_cluster_and_every_project_on_it(world: World) -> None:
    granted(world, world.a100)  # nlp-llm now has a namespace on the cluster
    ClusterPush.objects.all().delete()
    response = patch_cluster(world, "platform", {"use_hami": True, "sharing_reserve_percent": 20})
    assert response.status_code == 200, response.json()
    assert (response.json()["use_hami"], response.json()["sharing_reserve_percent"]) == (True, 20)
    assert response.json()["sharing_reserve_per_unit_mib"] == 200
    record = last_event("cluster.updated")
    assert record["before"] == {"use_hami": False, "sharing_reserve_percent": 15}
    assert record["after"] == {"use_hami": True, "sharing_reserve_percent": 20}
    pushed = sorted(ClusterPush.objects.filter(cluster=world.cluster).values_list("project__slug", flat=True), key=str)
    assert pushed == [None, "nlp-llm"]


def test_turning_the_pinning_off_is_audited_and_pushes_the_cluster_and_every_project_on_it(world: World) -> None:
    granted(world, world.a100)
    ClusterPush.objects.all().delete()
    response = patch_cluster(world, "platform", {"pin_bookings": False})
    assert response.status_code == 200 and response.json()["pin_bookings"] is False
    record = last_event("cluster.updated")
    assert (record["before"], record["after"]) == ({"pin_bookings": True}, {"pin_bookings": False})
    pushed = sorted(ClusterPush.objects.filter(cluster=world.cluster).values_list("project__slug", flat=True), key=str)
    assert pushed == [None, "nlp-llm"]  # the policies go, and each Namespace stops saying where it may run
    assert patch_cluster(world, "platform", {"pin_bookings": "sometimes"}).status_code == 400


def test_volcano_pushes_only_the_cluster_wide_objects_and_the_reserve_pushes_nothing(world: World) -> None:
    granted(world, world.a100)
    ClusterPush.objects.all().delete()
    assert patch_cluster(world, "platform", {"sharing_reserve_per_unit_mib": 512}).status_code == 200
    assert not ClusterPush.objects.exists()
    assert Cluster.objects.get(pk=world.cluster.pk).sharing_reserve_per_unit_mib == 512
    assert patch_cluster(world, "platform", {"use_volcano": True}).status_code == 200
    assert list(ClusterPush.objects.values_list("project_id", flat=True)) == [None]


def test_hami_cannot_be_turned_off_under_live_hami_vgpu_reservations(world: World) -> None:
    Cluster.objects.filter(pk=world.cluster.pk).update(use_hami=True)
    vgpu = vgpu_flavor()
    booked = granted(world, vgpu, project="seg", persona="vision_member", approver="vision_admin")
    assert booked.reservations.filter(released_at__isnull=True).count() == 1
    head = AuditEvent.objects.count()
    response = patch_cluster(world, "platform", {"use_hami": False})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "sharing_in_use"
    assert "1 live reservations of HAMi vGPU flavors (h100-vgpu)" in response.json()["error"]["message"]
    assert Cluster.objects.get(pk=world.cluster.pk).use_hami is True
    assert AuditEvent.objects.count() == head
    # Once released, it may go.
    services.allocation_release(actor=world.users["vision_member"], allocation_id=booked.pk)
    assert patch_cluster(world, "platform", {"use_hami": False}).status_code == 200


def test_volcano_cannot_be_turned_off_under_live_volcano_vgpu_reservations_but_hami_can(world: World) -> None:
    Cluster.objects.filter(pk=world.cluster.pk).update(use_hami=True, use_volcano=True)
    allocation = ask(world, vgpu_flavor(SharingMode.VOLCANO_VGPU))
    Reservation.objects.create(allocation=allocation, unit=0, node=node("h100-0"), gpu_indices=[0], gpu_milli=300)
    granted(world, world.a100)  # whole GPUs need neither
    response = patch_cluster(world, "platform", {"use_volcano": False})
    assert response.status_code == 409 and "turning use_volcano off" in response.json()["error"]["message"]
    assert patch_cluster(world, "platform", {"use_hami": False}).status_code == 200
    assert Cluster.objects.filter(pk=world.cluster.pk, use_volcano=True, use_hami=False).exists()


@pytest.mark.parametrize("persona", ["nlp_admin", "nlp_member", "auditor"])
def test_only_platform_admins_change_the_sharing_switches(world: World, persona: str) -> None:
    assert patch_cluster(world, persona, {"use_hami": True}).status_code == 403
    assert patch_cluster(world, "nobody", {"use_hami": True}).status_code == 404
    assert Cluster.objects.get(pk=world.cluster.pk).use_hami is False


# --------------------------------------------------------------------------------- node settings


def test_a_platform_admin_turns_a_node_to_mps_audited_and_the_node_configs_pushed(world: World) -> None:
    h100 = node("h100-0")
    response = patch_node(world, "platform", h100, {"sharing": "mps", "sharing_replicas": 4})
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["sharing"], body["sharing_replicas"], body["mig_layout"]) == ("mps", 4, [])
    assert {"driver_version", "cuda_version", "is_schedulable"} <= set(body)
    h100.refresh_from_db()
    assert (h100.sharing, h100.sharing_replicas) == (NodeSharing.MPS, 4)
    record = last_event("node.updated")
    assert record["before"] == {"sharing": "exclusive", "sharing_replicas": None}
    assert record["after"] == {"sharing": "mps", "sharing_replicas": 4}
    assert record["actor_username"] == "platform"
    assert list(ClusterPush.objects.filter(cluster=world.cluster).values_list("project_id", flat=True)) == [None]


def test_an_unchanged_node_writes_nothing_and_cordoning_pushes_nothing(world: World) -> None:
    h100 = node("h100-0")
    head = AuditEvent.objects.count()
    assert patch_node(world, "platform", h100, {"sharing": "exclusive"}).status_code == 200
    assert AuditEvent.objects.count() == head
    assert patch_node(world, "platform", h100, {"is_schedulable": False}).json()["is_schedulable"] is False
    assert AuditEvent.objects.count() == head + 1 and not ClusterPush.objects.exists()


@pytest.mark.parametrize(
    ("name", "body", "field"),
    [
        ("h100-0", {"sharing": "mps"}, "sharing_replicas"),  # replicas missing
        ("h100-0", {"sharing": "mps", "sharing_replicas": 49}, "sharing_replicas"),
        ("h100-0", {"sharing": "timeslice", "sharing_replicas": 1}, "sharing_replicas"),
        ("h100-0", {"sharing_replicas": 4}, "sharing_replicas"),  # exclusive has none
        ("h100-0", {"sharing": "shared"}, "sharing"),
        ("h100-0", {"sharing": "mig"}, "sharing"),  # H100s here are not MIG-capable (the device plugin's rule)
        ("h100-0", {"mig_layout": [{"devices": "all", "mig-devices": {"1g.10gb": 7}}]}, "mig_layout"),  # not a MIG node
        ("a100-0", {"mig_layout": [{"devices": "some"}]}, "mig_layout"),
        ("a100-0", {"mig_layout": [{"devices": [0], "mig-devices": {"7g.80gb": 1, "1g.10gb": 1}}]}, "mig_layout"),
        ("a100-0", {"mig_layout": [{"devices": [9], "mig-devices": {"1g.10gb": 7}}]}, "mig_layout"),
        ("h100-0", {"is_schedulable": "perhaps"}, "is_schedulable"),
        ("h100-0", {"driver_version": "550.54"}, "driver_version"),  # reported by the agent, not set here
        ("h100-0", {"name": "renamed"}, "name"),
    ],
)
def test_bad_node_settings_are_refused_naming_the_field_and_nothing_changes(
    world: World, name: str, body: dict[str, Any], field: str
) -> None:
    target = node(name)
    before = Node.objects.filter(pk=target.pk).values().get()
    head = AuditEvent.objects.count()
    response = patch_node(world, "platform", target, body)
    assert response.status_code == 400, response.json()
    assert field in response.json()["error"]["fields"]
    assert Node.objects.filter(pk=target.pk).values().get() == before
    assert AuditEvent.objects.count() == head and not ClusterPush.objects.exists()


def test_mps_past_16_replicas_is_refused_on_a_gpu_older_than_compute_capability_7_5(world: World) -> None:
    old = node("h100-0")
    Node.objects.filter(pk=old.pk).update(labels={"nvidia.com/gpu.compute.major": "7", "nvidia.com/gpu.compute.minor": "0"})
    response = patch_node(world, "platform", old, {"sharing": "mps", "sharing_replicas": 17})
    assert response.status_code == 400
    assert "maximum allowed replicas exceeded: 17 > 16" in response.json()["error"]["fields"]["sharing_replicas"][0]
    assert node("h100-0").sharing == NodeSharing.EXCLUSIVE
    assert patch_node(world, "platform", old, {"sharing": "mps", "sharing_replicas": 16}).status_code == 200


def test_a_node_with_live_reservations_keeps_its_sharing_but_may_be_cordoned(world: World) -> None:
    booked = granted(world, world.a100)
    (reservation,) = booked.reservations.filter(released_at__isnull=True)
    target = reservation.node
    head = AuditEvent.objects.count()
    response = patch_node(world, "platform", target, {"sharing": "exclusive"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "node_booked"
    assert f"holds 1 live GPU reservations (allocations {booked.pk})" in response.json()["error"]["message"]
    response = patch_node(world, "platform", target, {"mig_layout": [{"devices": [1], "mig-devices": {"1g.10gb": 7}}]})
    assert response.status_code == 409
    assert node(target.name).sharing == NodeSharing.MIG and node(target.name).mig_layout == []
    assert AuditEvent.objects.count() == head
    assert patch_node(world, "platform", target, {"is_schedulable": False}).status_code == 200
    # Released: the node may be reconfigured.
    services.allocation_release(actor=world.users["nlp_member"], allocation_id=booked.pk)
    assert patch_node(world, "platform", target, {"sharing": "exclusive"}).status_code == 200


@pytest.mark.parametrize("persona", ["nlp_admin", "nlp_member", "auditor", "vision_admin"])
def test_only_platform_admins_change_a_node(world: World, persona: str) -> None:
    target = node("h100-0")
    assert patch_node(world, persona, target, {"is_schedulable": False}).status_code == 403
    assert patch_node(world, "nobody", target, {"is_schedulable": False}).status_code == 404
    assert node("h100-0").is_schedulable is True


def test_the_admin_form_refuses_switching_hami_off_under_live_hami_vgpu_reservations(world: World) -> None:
    from delivery.admin import ClusterForm

    Cluster.objects.filter(pk=world.cluster.pk).update(use_hami=True)
    granted(world, vgpu_flavor(), project="seg", persona="vision_member", approver="vision_admin")
    cluster = Cluster.objects.get(pk=world.cluster.pk)
    data = {"name": cluster.name, "display_name": "", "driver": cluster.driver, "is_active": True,
            "use_hami": False, "use_volcano": False, "pin_bookings": True, "sharing_reserve_percent": 15,
            "sharing_reserve_per_unit_mib": 200, "gpu_operator_namespace": cluster.gpu_operator_namespace}
    form = ClusterForm(instance=cluster, data=data)
    assert not form.is_valid()
    assert "live reservations of HAMi vGPU flavors" in form.errors["use_hami"][0]
    assert ClusterForm(instance=cluster, data={**data, "use_hami": True}).is_valid()

"""Bookings the cluster honours, on the real API server with the scheduler and fake GPU nodes: the
node labels, the namespace's booked nodes, the admission policies that steer a project's pods to
the nodes its allocations booked and refuse any other, HAMi's GPU pinning, the MPS tenant label."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from django.utils import timezone
from kubernetes import client

from allocations.grants import services as allocation_services
from allocations.models import Allocation, Flavor, Quota, SharingMode
from clusters.models import Gpu, Node, NodeSharing
from delivery.pinning import MPS_TENANT_LABEL, POLICY_NAME, pool_label
from delivery.rendering import BOOKED_GPUS_ANNOTATION, BOOKED_NODES_ANNOTATION
from kube_testenv import GPUNodeSpec
from kube_testenv.kubeapi import wait_for_pod_bound
from kube_testenv.waiting import wait_for
from tests.conftest import H100, World

pytestmark = pytest.mark.django_db(transaction=True)


def grant(world: World, flavor: Flavor, quantity: int = 1) -> Allocation:
    start = timezone.now()
    allocation = allocation_services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=flavor, quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=7), justification="pinning",
    )
    return allocation_services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)


def pod(name: str, *, node: str = "", scheduler: str = "", gpus: int = 0) -> dict[str, Any]:
    limits = {"cpu": "100m", "memory": "64Mi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    container: dict[str, Any] = {"name": "c", "image": "x", "resources": {"limits": limits}}
    spec: dict[str, Any] = {"priorityClassName": "gpu-standard", "containers": [container]}
    if node:
        spec["nodeName"] = node
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
def nodes(kube_world: World, fake_gpu_nodes: Any) -> tuple[str, str]:
    """The world's H100 node and one A100 node, renamed to names only this test uses, registered
    as fake nodes (the A100 one is never booked by the H100 grants)."""
    suffix = uuid.uuid4().hex[:8]
    booked, other = f"pin-h100-{suffix}", f"pin-a100-{suffix}"
    Node.objects.filter(cluster=kube_world.cluster, name="h100-0").update(name=booked)
    Node.objects.filter(cluster=kube_world.cluster, name="a100-1").update(name=other)
    fake_gpu_nodes.add(GPUNodeSpec(booked, gpus=8))
    fake_gpu_nodes.add(GPUNodeSpec(other, gpus=8, product="NVIDIA-A100-SXM4-80GB", compute_capability=(8, 0)))
    return booked, other


def refused_elsewhere(core: Any, namespace: str, other: str) -> client.ApiException | None:
    """Try a pod naming a node its project did not book: the refusal once the policies are loaded."""
    try:
        core.create_namespaced_pod(namespace, pod(f"probe-{uuid.uuid4().hex[:6]}", node=other), dry_run="All")
    except client.ApiException as error:
        if error.status == 403 and POLICY_NAME in error.body:
            return error
        raise
    return None


def test_a_projects_pods_land_on_its_booked_node_and_a_pod_naming_another_is_refused(
    kube_world: World, core: Any, nodes: tuple[str, str]
) -> None:
    booked, other = nodes
    namespace = kube_world.llm.slug
    grant(kube_world, kube_world.h100, 2)

    assert core.read_node(booked).metadata.labels[pool_label(namespace)] == "booked"
    assert pool_label(namespace) not in (core.read_node(other).metadata.labels or {})
    assert core.read_namespace(namespace).metadata.annotations[BOOKED_NODES_ANNOTATION] == booked

    refusal = wait_for(lambda: refused_elsewhere(core, namespace, other), timeout=30,
                       what="the tenant pool policies to take effect")
    assert f"project {namespace} runs pods only on the nodes its GPU allocations booked ({booked}), not on {other}" in (
        refusal.body
    )

    # A pod naming no node is steered by the selector the mutating policy adds, and the scheduler binds it there.
    created = core.create_namespaced_pod(namespace, pod("train", gpus=1))
    assert created.spec.node_selector == {pool_label(namespace): "booked"}
    assert wait_for_pod_bound(core.api_client, namespace, "train").spec.node_name == booked
    # Naming the booked node is fine.
    assert core.create_namespaced_pod(namespace, pod("named", node=booked)).spec.node_name == booked

    # A binding (how a scheduler places a pod: the pods/binding subresource, or the older bindings
    # resource) to another node is refused too; to the booked one it is not.
    for name, bind in (("unscheduled", core.create_namespaced_pod_binding), ("unscheduled-2", None)):
        core.create_namespaced_pod(namespace, pod(name, scheduler="nobody"))
        target: dict[str, str] = {"apiVersion": "v1", "kind": "Node", "name": other}
        binding: dict[str, Any] = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": target}

        def create(body: dict[str, Any], bind: Any = bind, name: str = name) -> None:
            if bind is None:
                core.create_namespaced_binding(namespace, body, _preload_content=False)
            else:
                bind(name, namespace, body, _preload_content=False)

        with pytest.raises(client.ApiException) as refused:
            create(binding)
        assert refused.value.status == 403 and f"not on {other}" in refused.value.body
        target["name"] = booked
        create(binding)
        assert core.read_namespaced_pod(name, namespace).spec.node_name == booked


def test_when_the_grant_ends_the_node_label_goes_and_the_namespace_books_no_node(
    kube_world: World, core: Any, nodes: tuple[str, str]
) -> None:
    booked, _ = nodes
    namespace = kube_world.llm.slug
    allocation = grant(kube_world, kube_world.h100, 1)
    assert pool_label(namespace) in core.read_node(booked).metadata.labels
    allocation_services.allocation_release(actor=kube_world.users["nlp_member"], allocation_id=allocation.pk)
    assert pool_label(namespace) not in (core.read_node(booked).metadata.labels or {})


def test_hami_bookings_pin_the_pods_to_the_booked_gpus(kube_world: World, core: Any, nodes: tuple[str, str]) -> None:
    booked, _ = nodes
    namespace = kube_world.llm.slug
    kube_world.cluster.use_hami = True
    kube_world.cluster.save(update_fields=["use_hami"])
    for gpu in Gpu.objects.filter(node__name=booked):
        gpu.uuid = f"GPU-{booked}-{gpu.index}"
        gpu.save(update_fields=["uuid"])
    vgpu = Flavor.objects.create(
        name="h100-vgpu", display_name="vGPU", gpu_model=H100, sharing_mode=SharingMode.VGPU,
        resource_name="nvidia.com/gpu", memory_mib=10240, compute_percent=20, gpu_equivalents="0.2",
        cpu_millicores_per_unit=2000, memory_mib_per_unit=16384,
    )
    Quota.objects.create(department=kube_world.nlp, flavor=vgpu, guaranteed=0, limit=8)
    allocation = grant(kube_world, vgpu, 2)
    gpus = sorted({f"GPU-{booked}-{index}" for row in allocation.reservations.all() for index in row.gpu_indices})
    assert core.read_namespace(namespace).metadata.annotations[BOOKED_GPUS_ANNOTATION] == ",".join(gpus)

    def pinned() -> dict[str, str] | None:
        probe = core.create_namespaced_pod(namespace, pod(f"probe-{uuid.uuid4().hex[:6]}"), dry_run="All")
        annotations = probe.metadata.annotations or {}
        return annotations if "nvidia.com/use-gpuuuid" in annotations else None

    annotations = wait_for(pinned, timeout=30, what="the HAMi GPU pinning to take effect")
    assert annotations["nvidia.com/use-gpuuuid"] == ",".join(gpus)


def test_an_mps_node_is_labelled_for_the_department_it_serves(kube_world: World, core: Any, nodes: tuple[str, str]) -> None:
    booked, _ = nodes
    Node.objects.filter(name=booked).update(sharing=NodeSharing.MPS, sharing_replicas=4)
    Flavor.objects.filter(pk=kube_world.mps.pk).update(cpu_millicores_per_unit=2000, memory_mib_per_unit=16384)
    kube_world.mps.refresh_from_db()
    grant(kube_world, kube_world.mps, 2)
    assert core.read_node(booked).metadata.labels[MPS_TENANT_LABEL] == "nlp"


def test_a_cluster_that_does_not_pin_bookings_gets_no_policies_and_no_pool_labels(
    kube_world: World, core: Any, nodes: tuple[str, str], kube_cluster: Any
) -> None:
    booked, _ = nodes
    kube_world.cluster.pin_bookings = False
    kube_world.cluster.save(update_fields=["pin_bookings"])
    grant(kube_world, kube_world.h100, 1)
    assert pool_label(kube_world.llm.slug) not in (core.read_node(booked).metadata.labels or {})
    with kube_cluster.api_client() as api:
        policies = client.AdmissionregistrationV1Api(api).list_validating_admission_policy().items
    assert POLICY_NAME not in {policy.metadata.name for policy in policies}


def test_the_mps_reserve_holds_on_the_cluster_the_spare_replica_stays_unused_and_other_departments_keep_off(
    kube_world: World, core: Any, fake_gpu_nodes: Any
) -> None:
    """One 80 GiB GPU shared by MPS with 4 replicas: the daemon pins each client to 20 GiB, so with
    the memory reserve (15 % + 200 MiB a unit) only 3 units are booked. The device plugin still
    advertises 4 replicas; the namespace's quota holds the project to its 3, so the fourth (whose
    20 GiB would eat the reserve) is never used; the node is labelled for the department it serves,
    and other projects' pods go only where their own bookings are (the test above)."""
    name = f"pin-mps-{uuid.uuid4().hex[:8]}"
    node = Node.objects.get(cluster=kube_world.cluster, name="h100-0")
    node.name, node.sharing, node.sharing_replicas = name, NodeSharing.MPS, 4
    node.save()
    Gpu.objects.filter(node=node).exclude(index=0).delete()  # one GPU: its replicas are the whole node's
    fake_gpu_nodes.add(GPUNodeSpec(name, gpus=1, sharing="mps", replicas=4, rename_shared=True))
    Flavor.objects.filter(pk=kube_world.mps.pk).update(cpu_millicores_per_unit=2000, memory_mib_per_unit=16384)
    kube_world.mps.refresh_from_db()
    namespace = kube_world.llm.slug
    allocation = grant(kube_world, kube_world.mps, 3)
    assert sorted(row.gpu_milli for row in allocation.reservations.all()) == [297, 297, 297]
    with pytest.raises(Exception, match="No room for 1 × h100-mps"):
        grant(kube_world, kube_world.mps, 1)  # the fourth replica is not booked

    assert core.read_node(name).status.allocatable["nvidia.com/gpu.shared"] == "4"
    assert core.read_namespaced_resource_quota("gpuportal-gpu-quota", namespace).spec.hard[
        "requests.nvidia.com/gpu.shared"] == "3"
    assert core.read_node(name).metadata.labels[MPS_TENANT_LABEL] == "nlp"
    wait_for(lambda: refused_elsewhere(core, namespace, "no-such-node"), timeout=30,
             what="the tenant pool policies to take effect")

    def replica(pod_name: str) -> dict[str, Any]:
        body = pod(pod_name)
        body["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.shared"] = "1"
        return body

    for index in range(3):
        core.create_namespaced_pod(namespace, replica(f"replica-{index}"))
    for index in range(3):
        assert wait_for_pod_bound(core.api_client, namespace, f"replica-{index}").spec.node_name == name
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(namespace, replica("replica-3"))
    assert refused.value.status == 403 and "exceeded quota" in refused.value.body
    assert "limited: requests.nvidia.com/gpu.shared=3" in refused.value.body

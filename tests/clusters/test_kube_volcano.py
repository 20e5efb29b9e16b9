"""Volcano clusters on the real API server: Volcano vGPU grants in the project quota and the
department's Queue, the volcano-scheduler configuration in Volcano's namespace, and the
admission policy that binds a portal namespace's pods to their department's queue."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import pytest
import yaml
from kubernetes import client

from allocations.models import Flavor, PlacementPolicy, SharingMode
from delivery.drivers import driver_for
from delivery.services import cluster_desired_scopes
from delivery.volcano import QUEUE_ANNOTATION, SCHEDULER_CONF_KEY, scheduler_conf_violations
from kube_testenv import wait_for
from tests.clusters.test_kube_delivery import _volcano_queue_crd, grant, quota
from tests.conftest import H100, World

pytestmark = pytest.mark.django_db(transaction=True)


def _namespace(kube_cluster: Any, name: str) -> None:
    with kube_cluster.api_client() as api:
        try:
            client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
        except client.ApiException as error:
            if error.status != 409:
                raise


def volcano_world(world: World, kube_cluster: Any, *, policy: str = PlacementPolicy.SPREAD) -> World:
    """The World's cluster running Volcano (its Queue kind and namespace exist), with a Volcano
    vGPU flavor on the H100s, kept as ``world.mps`` so the grant helper can name it."""
    _volcano_queue_crd(kube_cluster)
    _namespace(kube_cluster, "volcano-system")
    world.cluster.use_volcano = True
    world.cluster.save(update_fields=["use_volcano"])
    world.mps = Flavor.objects.create(
        name="h100-vgpu", display_name="H100 Volcano vGPU 20 GiB", gpu_model=H100,
        sharing_mode=SharingMode.VOLCANO_VGPU, resource_name="volcano.sh/vgpu-number", memory_mib=20480,
        compute_percent=25, gpu_equivalents=Decimal("0.25"), placement_policy=policy,
    )
    return world


def test_a_volcano_vgpu_grant_lands_in_the_quota_the_queue_and_the_scheduler_configuration(
    kube_world: World, core: Any, kube_cluster: Any
) -> None:
    world = volcano_world(kube_world, kube_cluster)

    grant(world, quantity=3, flavor="mps")

    hard = quota(core, world.llm.slug).spec.hard
    assert hard["requests.volcano.sh/vgpu-number"] == "3"
    assert (hard["requests.volcano.sh/vgpu-memory"], hard["requests.volcano.sh/vgpu-cores"]) == (str(3 * 20480), "75")
    assert "limits.nvidia.com/gpumem" not in hard  # HAMi's keys are HAMi's only
    with kube_cluster.api_client() as api:
        queue = client.CustomObjectsApi(api).get_cluster_custom_object(
            "scheduling.volcano.sh", "v1beta1", "queues", "gpuportal-nlp"
        )
    wanted = {"volcano.sh/vgpu-number": "3", "volcano.sh/vgpu-memory": str(3 * 20480), "volcano.sh/vgpu-cores": "75"}
    assert queue["spec"]["capability"] == wanted and queue["spec"]["deserved"] == wanted
    configmap = core.read_namespaced_config_map("volcano-scheduler-configmap", "volcano-system")
    text = configmap.data[SCHEDULER_CONF_KEY]
    assert scheduler_conf_violations(text) == []
    deviceshare = [p for tier in yaml.safe_load(text)["tiers"] for p in tier["plugins"] if p["name"] == "deviceshare"]
    assert deviceshare == [{"name": "deviceshare", "arguments": {
        "deviceshare.VGPUEnable": True, "deviceshare.SchedulePolicy": "spread"}}]
    # What the API server stored (defaults included) reads as what was rendered: a resync writes nothing.
    driver = driver_for(world.cluster)
    try:
        plan = driver.plan(cluster_desired_scopes(cluster=world.cluster))
    finally:
        driver.close()
    assert [change.ref for change in plan.changes] == []


def _pod(name: str, *, limits: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"priorityClassName": "gpu-standard",
                 "containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]},
    }


def test_pods_of_a_portal_namespace_are_bound_to_their_departments_queue(
    kube_world: World, core: Any, kube_cluster: Any
) -> None:
    world = volcano_world(kube_world, kube_cluster)
    grant(world, quantity=3, flavor="mps")  # room in the limits quota for the three pods below
    namespace = world.llm.slug
    vgpu = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "20480"}

    def mutated() -> bool:  # the policy takes effect once the API server has loaded it
        probe = core.create_namespaced_pod(namespace, _pod(f"probe-{uuid.uuid4().hex[:6]}", limits=vgpu), dry_run="All")
        return bool(probe.spec.scheduler_name == "volcano")

    wait_for(mutated, timeout=30, what="the queue admission policy to take effect")

    core.create_namespaced_pod(namespace, _pod("vgpu", limits=vgpu))
    own = core.create_namespaced_pod(
        namespace, _pod("own-queue", limits=vgpu, annotations={QUEUE_ANNOTATION: "elsewhere"})
    )
    plain = core.create_namespaced_pod(namespace, _pod("cpu-only", limits={"cpu": "1"}))

    pod = core.read_namespaced_pod("vgpu", namespace)
    assert pod.spec.scheduler_name == "volcano"
    assert pod.metadata.annotations[QUEUE_ANNOTATION] == "gpuportal-nlp"
    assert own.metadata.annotations[QUEUE_ANNOTATION] == "elsewhere" and own.spec.scheduler_name == "volcano"
    assert plain.metadata.annotations[QUEUE_ANNOTATION] == "gpuportal-nlp"
    assert plain.spec.scheduler_name == "default-scheduler"  # no Volcano resource: left to the default scheduler


def test_pods_outside_portal_namespaces_are_left_alone(kube_world: World, core: Any, kube_cluster: Any) -> None:
    world = volcano_world(kube_world, kube_cluster)
    grant(world, quantity=1, flavor="mps")
    other = f"unmanaged-{uuid.uuid4().hex[:6]}"
    _namespace(kube_cluster, other)
    vgpu = {"volcano.sh/vgpu-number": "1"}
    wait_for(
        lambda: core.create_namespaced_pod(world.llm.slug, _pod("probe", limits=vgpu), dry_run="All").spec.scheduler_name
        == "volcano",
        timeout=30, what="the queue admission policy to take effect",
    )

    pod = core.create_namespaced_pod(other, {**_pod("vgpu", limits=vgpu), "spec": {
        "containers": [{"name": "c", "image": "x", "resources": {"limits": vgpu}}]}})

    assert pod.spec.scheduler_name == "default-scheduler"
    assert QUEUE_ANNOTATION not in (pod.metadata.annotations or {})

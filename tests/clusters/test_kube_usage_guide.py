"""The usage guide against the real API server: for every sharing mode, the Pod example the portal
shows for a grant is accepted (server-side dry run) by the ResourceQuotas, LimitRange and admission
policies the portal pushed into the project's namespace, the Job example's pods all fit the grant
together and one more does not, and an example asking for more than the grant is refused. This
proves that the examples and the quotas name the same resources in the same amounts."""

from __future__ import annotations

import copy
import datetime
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
import yaml
from django.utils import timezone
from kubernetes import client

from allocations.grants import services as allocation_services
from allocations.models import Allocation, AllocationState, Flavor, SharingMode
from clusters.models import Node, NodeSharing
from tests.clusters.test_kube_volcano import volcano_world
from tests.conftest import H100, World

pytestmark = pytest.mark.django_db(transaction=True)


def _exclusive(world: World, kube_cluster: Any) -> Flavor:
    return world.h100


def _mig(world: World, kube_cluster: Any) -> Flavor:
    return world.mig


def _shared(mode: str) -> Callable[[World, Any], Flavor]:
    def setup(world: World, kube_cluster: Any) -> Flavor:
        Node.objects.filter(cluster=world.cluster, name="h100-0").update(sharing=mode, sharing_replicas=4)
        if mode == NodeSharing.MPS:
            return world.mps
        return Flavor.objects.create(
            name="h100-ts", display_name="H100 time-sliced quarter", gpu_model=H100, sharing_mode=SharingMode.TIMESLICE,
            resource_name="nvidia.com/gpu.shared", replicas=4, memory_mib=16384, compute_percent=25,
            gpu_equivalents=Decimal("0.25"), cpu_millicores_per_unit=2000, memory_mib_per_unit=8192,
        )
    return setup


def _hami(world: World, kube_cluster: Any) -> Flavor:
    world.cluster.use_hami = True
    world.cluster.save(update_fields=["use_hami"])
    return Flavor.objects.create(
        name="h100-vgpu", display_name="H100 HAMi vGPU", gpu_model=H100, sharing_mode=SharingMode.VGPU,
        resource_name="nvidia.com/gpu", memory_mib=10240, compute_percent=20, gpu_equivalents=Decimal("0.2"),
        cpu_millicores_per_unit=2000, memory_mib_per_unit=16384,
    )


def _volcano(world: World, kube_cluster: Any) -> Flavor:
    return volcano_world(world, kube_cluster).mps


SETUPS: dict[str, Callable[[World, Any], Flavor]] = {
    "exclusive": _exclusive, "mig": _mig, "mps": _shared(NodeSharing.MPS), "timeslice": _shared(NodeSharing.TIMESLICE),
    "vgpu": _hami, "volcano-vgpu": _volcano,
}


def grant(world: World, flavor: Flavor, quantity: int) -> Allocation:
    start = timezone.now()
    allocation = allocation_services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=flavor, quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=7), justification="guide",
    )
    allocation_services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    allocation.refresh_from_db()
    return allocation


def named(obj: dict[str, Any], suffix: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["name"] = f"{out['metadata']['name']}-{suffix}"
    return out


def refusal(call: Callable[[], Any]) -> str:
    with pytest.raises(client.ApiException) as refused:
        call()
    assert refused.value.status == 403, refused.value.body
    return str(refused.value.body)


@pytest.mark.parametrize("mode", list(SETUPS))
def test_the_examples_fit_the_pushed_quota_and_more_than_the_grant_is_refused(
    mode: str, kube_world: World, core: Any, kube_cluster: Any
) -> None:
    flavor = SETUPS[mode](kube_world, kube_cluster)
    allocation = grant(kube_world, flavor, 2)
    assert allocation.state == AllocationState.ACTIVE, allocation.failure_reason
    answer = kube_world.client("nlp_member").get(f"/api/v1/allocations/{allocation.pk}/usage-guide/")
    assert answer.status_code == 200, answer.content
    guide = answer.json()
    namespace = kube_world.llm.slug
    assert guide["namespace"] == namespace and guide["status"] == "ready"
    pod = yaml.safe_load(guide["examples"]["pod"])
    job = yaml.safe_load(guide["examples"]["job"])

    # The Pod example as shown: accepted by the quotas, the LimitRange and the admission policies.
    accepted = core.create_namespaced_pod(namespace, named(pod, "dry"), dry_run="All")
    limits = accepted.spec.containers[0].resources.limits
    for line in guide["resources"]:
        assert limits[line["name"]] == str(line["per_pod"])
    # The Job example is a valid Job of the namespace.
    with kube_cluster.api_client() as api:
        client.BatchV1Api(api).create_namespaced_job(namespace, named(job, "dry"), dry_run="All")

    # The Job's pods (its template, parallelism times) fit the grant together, and one more does not.
    template = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "job-pod"}, "spec": job["spec"]["template"]["spec"]}
    for index in range(job["spec"]["parallelism"]):
        core.create_namespaced_pod(namespace, named(template, str(index)))
    assert "exceeded quota" in refusal(lambda: core.create_namespaced_pod(namespace, named(template, "extra"), dry_run="All"))

    # Asking in one pod for more than the whole grant of the first resource is refused by the quota.
    greedy = named(pod, f"greedy-{uuid.uuid4().hex[:4]}")
    first = guide["resources"][0]
    greedy["spec"]["containers"][0]["resources"]["limits"][first["name"]] = str(first["total"] + 1)
    body = refusal(lambda: core.create_namespaced_pod(namespace, greedy, dry_run="All"))
    assert "exceeded quota" in body and first["name"] in body


def test_a_pod_without_the_guides_priority_class_gets_no_gpu(kube_world: World, core: Any) -> None:
    allocation = grant(kube_world, kube_world.h100, 1)
    guide = kube_world.client("nlp_member").get(f"/api/v1/allocations/{allocation.pk}/usage-guide/").json()
    pod = yaml.safe_load(guide["examples"]["pod"])
    del pod["spec"]["priorityClassName"]
    body = refusal(lambda: core.create_namespaced_pod(kube_world.llm.slug, pod, dry_run="All"))
    assert "gpuportal-priority-other" in body

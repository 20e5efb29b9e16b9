"""The scenes the KWOK tests share: node pools only one test selects, the portal's quota for a
grant, a pod's phases as observed, and a pod pinned away from the free GPUs."""

from __future__ import annotations

import uuid
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from delivery.rendering import GrantedUnits, ProjectState, render_project
from kube_testenv import FakeGPUNodes, GPUNodeSpec, wait_for
from kube_testenv.kubeapi import wait_for_pod_unschedulable, wait_for_quota_status
from kube_testenv.workloads import gpu_pod

POOL = "gpuportal.test/pool"


def node_pool() -> dict[str, str]:
    """A node label no other test's nodes carry."""
    return {POOL: uuid.uuid4().hex[:12]}


def grant_quota(api: client.ApiClient, namespace: str, gpus: int) -> None:
    """The portal's ResourceQuota and LimitRange for a project granted *gpus* whole GPUs."""
    grant = GrantedUnits("nvidia.com/gpu", gpus, cpu_millicores_per_unit=8000, memory_mib_per_unit=65536)
    state = ProjectState(cluster="test", namespace=namespace, department="nlp", project="p", grants=(grant,))
    objects = {obj["kind"]: obj for obj in render_project(state)}
    core = client.CoreV1Api(api)
    core.create_namespaced_resource_quota(namespace, objects["ResourceQuota"])
    core.create_namespaced_limit_range(namespace, objects["LimitRange"])
    wait_for_quota_status(api, namespace, objects["ResourceQuota"]["metadata"]["name"])


def phase_history(api: client.ApiClient, namespace: str, name: str, until: str, timeout: float) -> list[str]:
    """The pod's phases as observed by polling, until it reaches *until* or is gone ("Deleted")."""
    core = client.CoreV1Api(api)
    seen: list[str] = []

    def probe() -> bool:
        try:
            phase: str = core.read_namespaced_pod(name, namespace).status.phase
        except ApiException as exc:
            if exc.status != 404:
                raise
            phase = "Deleted"
        if not seen or seen[-1] != phase:
            seen.append(phase)
        return phase == until

    wait_for(probe, timeout=timeout, interval=0.05, what=f"pod {namespace}/{name} to reach {until}")
    return seen


def pin_away_from_free_gpus(api: client.ApiClient, namespace: str, nodes: FakeGPUNodes) -> tuple[dict[str, str], Any]:
    """A one-GPU node whose GPU a running pod ("holder") holds, a four-GPU node free beside it, and
    a pod ("pinned") whose nodeSelector names the busy node's pool: the busy pool and that pod,
    once the scheduler has found it unschedulable."""
    busy, free = node_pool(), node_pool()
    nodes.add(GPUNodeSpec(f"kwok-{busy[POOL]}", gpus=1, labels=busy))
    nodes.add(GPUNodeSpec(f"kwok-{free[POOL]}", gpus=4, labels=free))
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, gpu_pod("holder", gpus=1, node_selector=busy))
    phase_history(api, namespace, "holder", until="Running", timeout=30)
    core.create_namespaced_pod(namespace, gpu_pod("pinned", gpus=1, node_selector=busy))
    return busy, wait_for_pod_unschedulable(api, namespace, "pinned")

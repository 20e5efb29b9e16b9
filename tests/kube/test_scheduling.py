"""The real scheduler places GPU pods on fake GPU nodes."""

from __future__ import annotations

import uuid

from kubernetes import client

from kube_testenv import FakeGPUNodes, GPUNodeSpec, mig_resource_name
from kube_testenv.kubeapi import (
    pod_condition,
    wait_for_pod_bound,
    wait_for_pod_unschedulable,
)
from kube_testenv.workloads import gpu_pod


def _pool() -> dict[str, str]:
    """A label only this test's nodes carry, so other tests' nodes don't interfere."""
    return {"gpuportal.test/pool": uuid.uuid4().hex[:12]}


def test_scheduler_binds_one_gpu_pod_to_fake_gpu_node(
    kube_api_client: client.ApiClient, kube_namespace: str, fake_gpu_nodes: FakeGPUNodes
) -> None:
    pool = _pool()
    name = f"gpu-{pool['gpuportal.test/pool']}"
    fake_gpu_nodes.add(GPUNodeSpec(name, gpus=8, labels=pool))
    core = client.CoreV1Api(kube_api_client)

    core.create_namespaced_pod(kube_namespace, gpu_pod("train", gpus=1, node_selector=pool))
    pod = wait_for_pod_bound(kube_api_client, kube_namespace, "train")

    assert pod.spec.node_name == name
    assert pod_condition(pod, "PodScheduled").status == "True"
    assert pod.status.phase == "Pending"  # bound, but no kubelet runs it


def test_pod_requesting_more_gpus_than_any_node_stays_pending_unschedulable(
    kube_api_client: client.ApiClient, kube_namespace: str, fake_gpu_nodes: FakeGPUNodes
) -> None:
    pool = _pool()
    fake_gpu_nodes.add(GPUNodeSpec(f"gpu-{pool['gpuportal.test/pool']}", gpus=8))
    core = client.CoreV1Api(kube_api_client)

    core.create_namespaced_pod(kube_namespace, gpu_pod("too-big", gpus=9))
    pod = wait_for_pod_unschedulable(kube_api_client, kube_namespace, "too-big")

    assert pod.spec.node_name is None
    assert pod.status.phase == "Pending"
    assert "Insufficient nvidia.com/gpu" in pod_condition(pod, "PodScheduled").message


def test_scheduler_places_mig_and_shared_gpu_requests_by_resource_name(
    kube_api_client: client.ApiClient, kube_namespace: str, fake_gpu_nodes: FakeGPUNodes
) -> None:
    pool = _pool()
    suffix = pool["gpuportal.test/pool"]
    mig = fake_gpu_nodes.add(
        GPUNodeSpec(
            f"mig-{suffix}",
            product="NVIDIA-A100-SXM4-80GB",
            compute_capability=(8, 0),
            mig_strategy="mixed",
            mig_gpus=8,
            mig_devices={"1g.10gb": 56},
            labels=pool,
        )
    )
    shared = fake_gpu_nodes.add(
        GPUNodeSpec(
            f"l4-{suffix}",
            gpus=2,
            product="NVIDIA-L4",
            mig_capable=False,
            sharing="time-slicing",
            replicas=4,
            rename_shared=True,
            labels=pool,
        )
    )
    core = client.CoreV1Api(kube_api_client)
    slice_resource = mig_resource_name("1g.10gb")
    core.create_namespaced_pod(
        kube_namespace,
        gpu_pod("slice", resource=slice_resource, node_selector=pool),
    )
    core.create_namespaced_pod(
        kube_namespace,
        gpu_pod("share", resource="nvidia.com/gpu.shared", node_selector=pool),
    )

    assert slice_resource == "nvidia.com/mig-1g.10gb"
    slice_pod = wait_for_pod_bound(kube_api_client, kube_namespace, "slice")
    share_pod = wait_for_pod_bound(kube_api_client, kube_namespace, "share")
    assert slice_pod.spec.node_name == mig.metadata.name
    assert share_pod.spec.node_name == shared.metadata.name

"""Namespace deletion is finished by the real namespace controller."""

from __future__ import annotations

import uuid

from kubernetes import client

from kube_testenv import FakeGPUNodes, GPUNodeSpec, KubeTestCluster, wait_for
from kube_testenv.kubeapi import namespace_gone, wait_for_pod_bound
from kube_testenv.workloads import gpu_pod, gpu_quota


def test_deleting_a_namespace_with_quota_and_bound_gpu_pod_completes(
    kube_cluster: KubeTestCluster,
    kube_api_client: client.ApiClient,
    fake_gpu_nodes: FakeGPUNodes,
) -> None:
    suffix = uuid.uuid4().hex[:8]
    namespace = f"doomed-{suffix}"
    pool = {"gpuportal.test/pool": suffix}
    fake_gpu_nodes.add(GPUNodeSpec(f"gpu-{suffix}", gpus=4, labels=pool))
    kube_cluster.create_namespace(namespace)
    core = client.CoreV1Api(kube_api_client)
    core.create_namespaced_resource_quota(namespace, gpu_quota("gpu-quota", {"requests.nvidia.com/gpu": 4}))
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "settings"}, "data": {"k": "v"}})
    core.create_namespaced_pod(namespace, gpu_pod("bound", gpus=1, node_selector=pool))
    wait_for_pod_bound(kube_api_client, namespace, "bound")

    core.delete_namespace(namespace)

    wait_for(
        lambda: namespace_gone(kube_api_client, namespace),
        timeout=60,
        what=f"namespace {namespace} to be deleted",
    )
    names = {item.metadata.name for item in core.list_namespace().items}
    assert namespace not in names

"""ResourceQuota on GPUs is enforced by the real admission plugin and controller."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kube_testenv import wait_for
from kube_testenv.kubeapi import wait_for_quota_status
from kube_testenv.workloads import gpu_pod, gpu_quota

GPU_REQUESTS = "requests.nvidia.com/gpu"


def test_quota_rejects_pod_over_gpu_limit(kube_api_client: client.ApiClient, kube_namespace: str) -> None:
    core = client.CoreV1Api(kube_api_client)
    core.create_namespaced_resource_quota(kube_namespace, gpu_quota("gpu-quota", {GPU_REQUESTS: 2}))
    wait_for_quota_status(kube_api_client, kube_namespace, "gpu-quota")

    core.create_namespaced_pod(kube_namespace, gpu_pod("two-gpus", gpus=2))
    with pytest.raises(ApiException) as rejected:
        core.create_namespaced_pod(kube_namespace, gpu_pod("one-more", gpus=1))

    assert rejected.value.status == 403
    message = json.loads(rejected.value.body)["message"]
    assert message == (
        'pods "one-more" is forbidden: exceeded quota: gpu-quota, '
        f"requested: {GPU_REQUESTS}=1, used: {GPU_REQUESTS}=2, limited: {GPU_REQUESTS}=2"
    )


def test_quota_admits_pods_up_to_the_gpu_limit_one_by_one(
    kube_api_client: client.ApiClient, kube_namespace: str
) -> None:
    core = client.CoreV1Api(kube_api_client)
    core.create_namespaced_resource_quota(kube_namespace, gpu_quota("gpu-quota", {GPU_REQUESTS: 2}))
    wait_for_quota_status(kube_api_client, kube_namespace, "gpu-quota")

    core.create_namespaced_pod(kube_namespace, gpu_pod("first", gpus=1))
    core.create_namespaced_pod(kube_namespace, gpu_pod("second", gpus=1))
    with pytest.raises(ApiException, match="exceeded quota: gpu-quota") as rejected:
        core.create_namespaced_pod(kube_namespace, gpu_pod("third", gpus=1))
    assert rejected.value.status == 403
    # Pods without GPUs are not charged against a GPU-only quota.
    core.create_namespaced_pod(kube_namespace, gpu_pod("cpu-only", gpus=0))


def test_controller_manager_fills_quota_status_used(kube_api_client: client.ApiClient, kube_namespace: str) -> None:
    core = client.CoreV1Api(kube_api_client)
    # Pods first: admission charged nothing, so only the quota controller's own
    # count of the namespace can fill status.used.
    core.create_namespaced_pod(kube_namespace, gpu_pod("a", gpus=1))
    core.create_namespaced_pod(kube_namespace, gpu_pod("b", gpus=2))
    core.create_namespaced_resource_quota(kube_namespace, gpu_quota("gpu-quota", {GPU_REQUESTS: 8, "pods": 10}))

    def used(expected: dict[str, str]) -> Any:
        quota = core.read_namespaced_resource_quota("gpu-quota", kube_namespace)
        return quota if quota.status and quota.status.used == expected else None

    quota = wait_for(
        lambda: used({GPU_REQUESTS: "3", "pods": "2"}),
        timeout=30,
        what="quota status.used after creation",
    )
    assert quota.status.hard == {GPU_REQUESTS: "8", "pods": "10"}

    # Replenishment: deleting a pod gives its GPUs back.
    core.delete_namespaced_pod("b", kube_namespace)
    wait_for(
        lambda: used({GPU_REQUESTS: "1", "pods": "1"}),
        timeout=30,
        what="quota status.used after a pod was deleted",
    )

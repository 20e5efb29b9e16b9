"""Pods that run: kwok plays the kubelet for the fake GPU nodes, the real scheduler places the pods.

Each test uses nodes only it selects (a pool label), in a namespace with the quota and LimitRange the
portal renders for a grant (``delivery.rendering.render_project``), so what is proved is what a
tenant's pod meets on a cluster the portal manages: admission under its quota, placement by the real
kube-scheduler, then Running, Succeeded and deleted with kwok writing the status transitions.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kube_testenv import FakeGPUNodes, GPUNodeSpec, wait_for
from kube_testenv.kubeapi import pod_condition
from kube_testenv.workloads import gpu_pod, with_lifetime
from tests.kube.kwok_scene import POOL, grant_quota, node_pool, phase_history, pin_away_from_free_gpus

GPU_REQUESTS = "requests.nvidia.com/gpu"


def _read_pod(api: client.ApiClient, namespace: str, name: str) -> Any:
    return client.CoreV1Api(api).read_namespaced_pod(name, namespace)


def test_a_granted_gpu_pod_is_placed_runs_completes_and_is_deleted(
    kube_api_client: client.ApiClient, kube_namespace: str, kwok_gpu_nodes: FakeGPUNodes
) -> None:
    pool = node_pool()
    node = f"kwok-{pool[POOL]}"
    kwok_gpu_nodes.add(GPUNodeSpec(node, gpus=2, labels=pool))
    grant_quota(kube_api_client, kube_namespace, gpus=1)
    core = client.CoreV1Api(kube_api_client)

    pod = with_lifetime(gpu_pod("train", gpus=1, node_selector=pool), run_for="2s", remove_after="1s")
    core.create_namespaced_pod(kube_namespace, pod)
    running = phase_history(kube_api_client, kube_namespace, "train", until="Running", timeout=30)
    live = _read_pod(kube_api_client, kube_namespace, "train")
    assert live.spec.node_name == node  # the real scheduler's choice, the only node of the pool
    assert pod_condition(live, "Ready").status == "True"
    [container] = live.status.container_statuses
    started = container.state.running.started_at
    assert started is not None and live.status.pod_ip

    finished = phase_history(kube_api_client, kube_namespace, "train", until="Succeeded", timeout=30)
    done = _read_pod(kube_api_client, kube_namespace, "train")
    [container] = done.status.container_statuses
    assert container.state.terminated.reason == "Completed" and container.state.terminated.exit_code == 0
    assert container.state.terminated.started_at == started
    assert (container.state.terminated.finished_at - started).total_seconds() >= 1  # ran about run-for

    gone = phase_history(kube_api_client, kube_namespace, "train", until="Deleted", timeout=30)
    assert running[-1] == "Running" and "Running" not in finished[1:] and gone[-1] == "Deleted"
    quota = core.read_namespaced_resource_quota("gpuportal-gpu-quota", kube_namespace)
    assert quota.status.hard[GPU_REQUESTS] == "1"


def test_a_pod_over_its_namespace_quota_is_refused_while_the_granted_one_runs(
    kube_api_client: client.ApiClient, kube_namespace: str, kwok_gpu_nodes: FakeGPUNodes
) -> None:
    pool = node_pool()
    kwok_gpu_nodes.add(GPUNodeSpec(f"kwok-{pool[POOL]}", gpus=8, labels=pool))
    grant_quota(kube_api_client, kube_namespace, gpus=1)
    core = client.CoreV1Api(kube_api_client)
    core.create_namespaced_pod(kube_namespace, gpu_pod("granted", gpus=1, node_selector=pool))
    phase_history(kube_api_client, kube_namespace, "granted", until="Running", timeout=30)

    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(kube_namespace, gpu_pod("one-more", gpus=1, node_selector=pool))

    assert refused.value.status == 403
    message = json.loads(refused.value.body)["message"]
    assert message.startswith('pods "one-more" is forbidden: exceeded quota: gpuportal-gpu-quota, requested: ')
    # The LimitRange's defaults charge CPU and memory too; the GPU is what the grant caps at one.
    requested, rest = message.split(", requested: ")[1].split(", used: ")
    used, limited = rest.split(", limited: ")
    for part in (requested, used, limited):
        assert f"{GPU_REQUESTS}=1" in part.split(","), part


def test_a_pod_pinned_away_from_the_free_gpus_stays_pending_with_failed_scheduling(
    kube_api_client: client.ApiClient, kube_namespace: str, kwok_gpu_nodes: FakeGPUNodes
) -> None:
    grant_quota(kube_api_client, kube_namespace, gpus=4)
    _, pod = pin_away_from_free_gpus(kube_api_client, kube_namespace, kwok_gpu_nodes)
    core = client.CoreV1Api(kube_api_client)

    assert pod.spec.node_name is None and pod.status.phase == "Pending"
    assert "Insufficient nvidia.com/gpu" in pod_condition(pod, "PodScheduled").message

    def failed_scheduling() -> Any:
        events = core.list_namespaced_event(kube_namespace, field_selector="involvedObject.name=pinned").items
        return [event for event in events if event.reason == "FailedScheduling"] or None

    [event] = wait_for(failed_scheduling, timeout=30, what="a FailedScheduling event for pinned")
    assert event.type == "Warning" and "Insufficient nvidia.com/gpu" in event.message
    assert _read_pod(kube_api_client, kube_namespace, "pinned").status.phase == "Pending"

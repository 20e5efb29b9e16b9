"""Pods that wait on the test cluster, explained: the driver's read (as an identity that may only
list pods and events in the tenant namespace, as the evictor role allows) and the pod reason
mapper give a pod over its namespace's quota, one pinned away from the free GPUs and one asking
more than granted their reasons (docs/pending.md, "Pending pods")."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from kubernetes import client

from allocations.grants import services
from delivery.drivers.kubernetes import KubernetesDriver
from delivery.pod_reasons import PodExplanation, PodReasonCode, pod_explain
from kube_testenv import FakeGPUNodes, GPUNodeSpec, wait_for
from kube_testenv.cluster import KubeTestCluster
from kube_testenv.workloads import gpu_pod
from tests.clusters.conftest import unique_projects, use_kubeconfig
from tests.conftest import World
from tests.kube.kwok_scene import POOL, grant_quota, node_pool, phase_history, pin_away_from_free_gpus

READER_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
]


def _reader(kube_cluster: KubeTestCluster, api: client.ApiClient, namespace: str) -> KubernetesDriver:
    """The driver as an identity with the evictor role's reads in ``namespace`` only."""
    user = f"reader-{uuid.uuid4().hex[:6]}"
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "reader"}, "rules": READER_RULES})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "reader"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})  # fmt: skip
    return KubernetesDriver(cluster="test", kubeconfig=kube_cluster.user_kubeconfig(user).read_text())


def _replica_set(name: str, gpus: int, selector: dict[str, str]) -> dict[str, Any]:
    """One replica of a GPU pod: its controller creates the pod, or records why it could not."""
    labels = {"app": name}
    template = gpu_pod(name, gpus=gpus, node_selector=selector, labels=labels)
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": template["spec"]}}}


def _explained(driver: KubernetesDriver, namespace: str, name: str, granted: dict[str, int]) -> PodExplanation:
    def found() -> PodExplanation | None:
        read = driver.read_pending(namespace=namespace, older_than=datetime.timedelta(0))
        return next((pod_explain(w, granted=granted) for w in read.workloads if w.name == name), None)

    answer: PodExplanation = wait_for(found, timeout=30, what=f"{name} to be read as waiting")
    return answer


def test_a_workload_over_its_namespace_quota_and_one_asking_more_than_granted_are_explained(
    kube_cluster: KubeTestCluster, kube_api_client: client.ApiClient, kube_namespace: str, kwok_gpu_nodes: FakeGPUNodes
) -> None:
    pool = node_pool()
    kwok_gpu_nodes.add(GPUNodeSpec(f"kwok-{pool[POOL]}", gpus=8, labels=pool))
    grant_quota(kube_api_client, kube_namespace, gpus=1)
    core, apps = client.CoreV1Api(kube_api_client), client.AppsV1Api(kube_api_client)
    core.create_namespaced_pod(kube_namespace, gpu_pod("granted", gpus=1, node_selector=pool))
    phase_history(kube_api_client, kube_namespace, "granted", until="Running", timeout=30)
    apps.create_namespaced_replica_set(kube_namespace, _replica_set("one-more", 1, pool))
    apps.create_namespaced_replica_set(kube_namespace, _replica_set("too-big", 2, pool))
    driver = _reader(kube_cluster, kube_api_client, kube_namespace)
    granted = {"nvidia.com/gpu": 1}

    over = _explained(driver, kube_namespace, "one-more", granted)
    assert (over.kind, over.code) == ("ReplicaSet", PodReasonCode.OVER_NAMESPACE_QUOTA)
    assert over.facts["quota"] == "gpuportal-gpu-quota" and over.facts["resource"] == "nvidia.com/gpu"
    assert (over.facts["requested"], over.facts["used"], over.facts["hard"]) == ("1", "1", "1")

    big = _explained(driver, kube_namespace, "too-big", granted)
    assert (big.kind, big.code) == ("ReplicaSet", PodReasonCode.ASKS_MORE_THAN_GRANTED)
    assert "asks 2 nvidia.com/gpu per pod but the grant is 1" in big.text
    assert "granted" not in {w.name for w in driver.read_pending(namespace=kube_namespace, older_than=datetime.timedelta(0)).workloads}
    driver.close()


def test_a_pod_pinned_away_from_the_free_gpus_is_explained_by_its_selector(
    kube_cluster: KubeTestCluster, kube_api_client: client.ApiClient, kube_namespace: str, kwok_gpu_nodes: FakeGPUNodes
) -> None:
    grant_quota(kube_api_client, kube_namespace, gpus=4)
    busy, _ = pin_away_from_free_gpus(kube_api_client, kube_namespace, kwok_gpu_nodes)
    driver = _reader(kube_cluster, kube_api_client, kube_namespace)

    answer = _explained(driver, kube_namespace, "pinned", {"nvidia.com/gpu": 4})
    assert (answer.kind, answer.code) == ("Pod", PodReasonCode.NODE_CONSTRAINT)
    assert answer.facts["in_the_way"] == f"the pod's nodeSelector {POOL}={busy[POOL]}"
    assert answer.facts["insufficient"] == {"nvidia.com/gpu": 1} and answer.facts["selector_mismatch"] >= 1
    # Its reader has no right outside the namespace: the same read elsewhere is refused.
    refused = driver.rest.request("GET", "/api/v1/namespaces/kube-system/events")[0]
    assert refused == 403
    driver.close()


@pytest.mark.django_db
def test_a_pod_made_pending_on_the_cluster_is_explained_on_its_allocations_page_and_api(
    world: World, kube_cluster: KubeTestCluster, kube_api_client: client.ApiClient, kwok_gpu_nodes: FakeGPUNodes,
    settings: Any,
) -> None:
    """The whole way: the portal's endpoint and page read the cluster through the allocation's
    cluster driver (Kubernetes, the test cluster) and explain the pod."""
    unique_projects(world)
    allocation = services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=1,
        priority_class=world.standard, starts_at=timezone.now(), ends_at=timezone.now() + datetime.timedelta(days=1),
        justification="pods",
    )
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    use_kubeconfig(world.cluster, kube_cluster.kubeconfig.read_text())
    settings.GPUPORTAL_PENDING_POD_THRESHOLD_SECONDS = 0
    namespace = world.llm.slug
    core = client.CoreV1Api(kube_api_client)
    core.create_namespace({"metadata": {"name": namespace}})
    busy, _ = pin_away_from_free_gpus(kube_api_client, namespace, kwok_gpu_nodes)

    data = world.client("nlp_member").get(f"/api/v1/allocations/{allocation.pk}/pods/").json()
    assert (data["status"], data["namespace"]) == ("read", namespace), data
    [pod] = data["pods"]
    assert (pod["kind"], pod["name"], pod["code"]) == ("Pod", "pinned", "pod-unschedulable-node-constraint")
    browser = Client()
    browser.force_login(world.users["nlp_member"])
    panel = browser.get(f"/allocations/{allocation.pk}/pods/", headers={"HX-Request": "true"}).content.decode()
    assert "<strong>Pod pinned</strong> <code>pod-unschedulable-node-constraint</code>" in panel
    assert f"the pod&#x27;s nodeSelector {POOL}={busy[POOL]}" in panel
    core.delete_namespace(namespace)

"""Small helpers over the official client that most cluster tests need."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from kube_testenv.waiting import wait_for


def wait_for_default_service_account(api: client.ApiClient, namespace: str, timeout: float = 30.0) -> None:
    """Wait until the controller-manager created ``default`` in *namespace*.

    The ServiceAccount admission plugin rejects pods until it exists, so a
    test that creates a namespace and at once a pod would race without this.
    """
    core = client.CoreV1Api(api)

    def probe() -> bool:
        try:
            core.read_namespaced_service_account("default", namespace)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    wait_for(probe, timeout=timeout, what=f"service account {namespace}/default")


def create_namespace(
    api: client.ApiClient,
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    wait_for_service_account: bool = True,
) -> Any:
    """Create namespace *name* and (by default) wait until pods can be created in it."""
    body = client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=dict(labels or {})))
    created = client.CoreV1Api(api).create_namespace(body)
    if wait_for_service_account:
        wait_for_default_service_account(api, name)
    return created


def namespace_gone(api: client.ApiClient, name: str) -> bool:
    """True once namespace *name* no longer exists (deletion finished)."""
    try:
        client.CoreV1Api(api).read_namespace(name)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def wait_for_quota_status(api: client.ApiClient, namespace: str, name: str, timeout: float = 30.0) -> Any:
    """Wait until the controller-manager filled ``status.hard`` of a ResourceQuota.

    Until then the ResourceQuota admission plugin rejects every pod in the
    namespace with "status unknown for quota".
    """
    core = client.CoreV1Api(api)

    def probe() -> Any:
        quota = core.read_namespaced_resource_quota(name, namespace)
        return quota if quota.status and quota.status.hard else None

    return wait_for(probe, timeout=timeout, what=f"status of quota {namespace}/{name}")


def pod_condition(pod: Any, kind: str) -> Any:
    """The pod's condition of type *kind* (e.g. ``PodScheduled``), or None."""
    for condition in (pod.status and pod.status.conditions) or []:
        if condition.type == kind:
            return condition
    return None


def wait_for_pod_bound(api: client.ApiClient, namespace: str, name: str, timeout: float = 30.0) -> Any:
    """Wait until the scheduler bound the pod to a node; return the pod."""
    core = client.CoreV1Api(api)

    def probe() -> Any:
        pod = core.read_namespaced_pod(name, namespace)
        return pod if pod.spec.node_name else None

    return wait_for(probe, timeout=timeout, what=f"pod {namespace}/{name} to be bound")


def wait_for_pod_unschedulable(api: client.ApiClient, namespace: str, name: str, timeout: float = 30.0) -> Any:
    """Wait until the scheduler marked the pod ``PodScheduled=False/Unschedulable``."""
    core = client.CoreV1Api(api)

    def probe() -> Any:
        pod = core.read_namespaced_pod(name, namespace)
        condition = pod_condition(pod, "PodScheduled")
        unschedulable = condition is not None and condition.status == "False" and condition.reason == "Unschedulable"
        return pod if unschedulable else None

    return wait_for(probe, timeout=timeout, what=f"pod {namespace}/{name} to be Unschedulable")

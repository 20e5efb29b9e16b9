"""Manifests tests create often: pods that ask for GPUs, GPU quotas."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kube_testenv.gpu_nodes import GPU
from kube_testenv.kwok import REMOVE_AFTER_ANNOTATION, RUN_FOR_ANNOTATION

#: Never pulled (there is no kubelet); any valid image reference would do.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.1"


def gpu_pod(
    name: str,
    gpus: int = 1,
    *,
    resource: str = GPU,
    node_selector: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    priority_class: str | None = None,
) -> dict[str, Any]:
    """A single-container pod requesting *gpus* units of *resource* (none if 0).

    Extended resources cannot be overcommitted, so only ``limits`` is set for
    them (the API server copies it to ``requests``), as users usually write it.
    """
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    if gpus:
        resources["limits"] = {resource: str(gpus)}
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": resources}],
        "terminationGracePeriodSeconds": 1,
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": spec,
    }


def with_lifetime(pod: dict[str, Any], *, run_for: str, remove_after: str | None = None) -> dict[str, Any]:
    """*pod* annotated for kwok: it runs for *run_for*, then succeeds; deleted *remove_after* later.

    Durations are Go's (``"2s"``, ``"500ms"``). Without these annotations a pod on a kwok node runs
    until deleted.
    """
    annotations = pod["metadata"].setdefault("annotations", {})
    annotations[RUN_FOR_ANNOTATION] = run_for
    if remove_after is not None:
        annotations[REMOVE_AFTER_ANNOTATION] = remove_after
    return pod


def gpu_quota(name: str, hard: Mapping[str, str | int], scopes: list[str] | None = None) -> dict[str, Any]:
    """A ResourceQuota; use ``requests.<extended resource>`` keys for GPUs."""
    spec: dict[str, Any] = {"hard": {key: str(value) for key, value in hard.items()}}
    if scopes:
        spec["scopes"] = scopes
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name},
        "spec": spec,
    }

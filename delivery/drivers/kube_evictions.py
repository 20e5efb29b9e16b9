"""Evicting the pods beyond a lowered GPU quota on a Kubernetes cluster.

The choice (which pods, in which order) is :mod:`delivery.eviction`'s; this module reads the live
pods and asks the API server to evict the chosen ones, one at a time in that order, through the
``policy/v1`` Eviction subresource, so PodDisruptionBudgets are honoured: the API server refuses
(429) an eviction a budget does not allow now. Such a pod is *held back*: the push still
succeeds, reports it, and the next push (the drift repair, or any push of the project) chooses it
again. A pod gone meanwhile (404) is skipped. Any other refusal stops the evictions and fails the
push like a failed write, its message naming the pods already evicted.

The portal's kubeconfig needs ``list`` on ``pods`` and ``create`` on ``pods/eviction`` in each tenant
namespace, which the target chart grants through the RoleBinding the portal writes there
(``delivery.drivers.kube_identity``), never across the cluster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Protocol
from urllib.parse import quote

from delivery.drivers.base import ApplyResult, DriverError, PermanentDriverError
from delivery.eviction import PodEviction, PodUsage, pod_usage

log = logging.getLogger(__name__)

# Only pods that may still hold GPUs: the API server filters the finished ones out.
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
PAGE_SIZE = 500
# The API server cannot evict a pod that two budgets select (500); only a person can fix that.
MULTIPLE_BUDGETS = "more than one PodDisruptionBudget"


class Rest(Protocol):
    """What this module needs of :class:`delivery.drivers.kubernetes.KubeRest`."""

    cluster: str

    def request(
        self, method: str, path: str, *, query: dict[str, str] | None = None, body: Any = None,
        content_type: str = "application/json",
    ) -> tuple[int, Any]: ...

    def checked(self, method: str, path: str, *, what: str, allow: Iterable[int] = (), **kwargs: Any) -> tuple[int, Any]: ...

    def failure(self, status: int, payload: Any, *, what: str) -> DriverError: ...


def live_pods(rest: Rest, *, namespaces: list[str], fresh: frozenset[str] = frozenset()) -> tuple[list[PodUsage], int]:
    """The pods of ``namespaces`` that still hold something, and how many reads it took: one list
    per namespace (paged), never across the cluster: the portal may read pods only in the tenant
    namespaces it binds its evictor role in (``delivery.drivers.kube_identity``). ``fresh``: the
    namespaces whose binding this push created; a 403 there (the authorizer has not seen the
    binding yet) is asked again a few times, then fails the push for a later retry."""
    pods: list[PodUsage] = []
    reads = 0
    for namespace in namespaces:
        found, taken = _namespace_pods(rest, namespace, fresh=namespace in fresh)
        pods += found
        reads += taken
    return pods, reads


FORBIDDEN_RETRIES = (0.2, 0.5, 1.0, 2.0)


def pause(seconds: float) -> None:
    time.sleep(seconds)


def _namespace_pods(rest: Rest, namespace: str, *, fresh: bool) -> tuple[list[PodUsage], int]:
    path = f"/api/v1/namespaces/{quote(namespace)}/pods"
    query = {"fieldSelector": LIVE_PODS, "limit": str(PAGE_SIZE)}
    pods: list[PodUsage] = []
    reads = 0
    pauses = list(FORBIDDEN_RETRIES) if fresh else []
    while True:
        reads += 1
        status, payload = rest.request("GET", path, query=query)
        if status == 403 and pauses:
            pause(pauses.pop(0))
            continue
        if not 200 <= status < 300:
            error = rest.failure(status, payload, what=f"list Pods in {namespace}")
            raise DriverError(str(error)) if status == 403 and fresh else error  # the binding may be on its way
        for item in payload.get("items", []):
            usage = pod_usage(item)
            if usage is not None and usage.requests:
                pods.append(usage)
        token = (payload.get("metadata") or {}).get("continue")
        if not token:
            return pods, reads
        query = {**query, "continue": token}


def _message(payload: Any) -> str:
    if not isinstance(payload, dict):
        return str(payload)
    causes = [cause.get("message", "") for cause in (payload.get("details") or {}).get("causes") or []]
    return " ".join(part for part in [payload.get("message", ""), *causes] if part)


def pods_evict(rest: Rest, chosen: list[PodEviction]) -> ApplyResult:
    """Evict ``chosen`` in order; returns the evicted and the held-back pods."""
    evicted: list[PodEviction] = []
    held_back: list[PodEviction] = []
    for eviction in chosen:
        path = f"/api/v1/namespaces/{quote(eviction.namespace)}/pods/{quote(eviction.name)}/eviction"
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": eviction.name, "namespace": eviction.namespace},
        }
        try:
            status, payload = rest.request("POST", path, body=body)
        except DriverError as error:
            raise _interrupted(error, evicted) from None
        message = _message(payload)
        if 200 <= status < 300:
            evicted.append(eviction)
        elif status == 404:
            continue  # gone meanwhile: it holds nothing any more
        elif status in (409, 429) or (status == 500 and MULTIPLE_BUDGETS in message):
            held_back.append(replace(eviction, reason=f"HTTP {status}: {message}"[:500]))
        else:
            raise _interrupted(rest.failure(status, payload, what=f"evict pod {eviction.ref}"), evicted)
    if held_back:
        log.warning("cluster %s: %s pod(s) beyond the GPU quota not evicted yet: %s", rest.cluster, len(held_back),
                    "; ".join(f"{pod.ref} ({pod.reason})" for pod in held_back))
    return ApplyResult(applied=0, pruned=0, unchanged=0, evicted=tuple(evicted), held_back=tuple(held_back))


def _interrupted(error: DriverError, evicted: list[PodEviction]) -> DriverError:
    """The error that stopped the evictions, saying which pods had already been evicted (the
    push fails, so no audit event lists them)."""
    if not evicted:
        return error
    done = ", ".join(eviction.ref for eviction in evicted)
    kind = PermanentDriverError if isinstance(error, PermanentDriverError) else DriverError
    return kind(f"{error} (evicted before this failure: {done})")

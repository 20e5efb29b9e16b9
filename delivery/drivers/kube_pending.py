"""Reading what waits in one tenant namespace on a Kubernetes cluster (read-only).

The pods Pending longer than a threshold, with their PodScheduled condition, and the events that
say why: the scheduler's ``FailedScheduling`` about a pod, the controllers' ``FailedCreate`` about
a Job or ReplicaSet whose pods the API server refused (the namespace's ResourceQuota or LimitRange,
an admission policy): such a pod never exists, so the controller stands for it. Two lists per
namespace (pods, events), paged; the nodes only when a pending pod asks for a MIG slice (the MIG
manager's state label). The portal's rights: ``list`` on ``pods`` and ``events`` in the namespaces
it manages (the ``gpuportal-evictor`` role it binds there, ``delivery.drivers.kube_identity``),
never across the cluster. :mod:`delivery.pod_reasons` turns the result into explanations.
"""

from __future__ import annotations

import datetime
from typing import Any
from urllib.parse import quote

from delivery.drivers.kube_evictions import PAGE_SIZE, Rest
from delivery.eviction import pod_requests
from delivery.pod_reasons import MIG_RESOURCE_PREFIX, PendingRead, PendingWorkload, PodEvent

REASONS = frozenset({"FailedScheduling", "FailedCreate"})
# A controller's refusal older than this is history (the Job gave up, or was deleted): the
# controllers retry a refused create within minutes while they still want the pod.
REFUSAL_FRESHNESS = datetime.timedelta(minutes=15)


def _items(rest: Rest, path: str, query: dict[str, str], what: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    query = {**query, "limit": str(PAGE_SIZE)}
    while True:
        _, payload = rest.checked("GET", path, query=query, what=what)
        items += payload.get("items", [])
        token = (payload.get("metadata") or {}).get("continue")
        if not token:
            return items
        query = {**query, "continue": token}


def _moment(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _event(item: dict[str, Any]) -> PodEvent:
    last = item.get("lastTimestamp") or item.get("eventTime") or item.get("firstTimestamp") or ""
    return PodEvent(reason=str(item.get("reason", "")), message=str(item.get("message", "")), last_seen=str(last),
                    count=int(item.get("count") or 1))


def _events_by_object(items: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for item in items:
        if item.get("reason") in REASONS:
            involved = item.get("involvedObject") or {}
            found.setdefault((str(involved.get("kind", "")), str(involved.get("name", ""))), []).append(item)
    for events in found.values():
        events.sort(key=lambda event: str(event.get("lastTimestamp") or event.get("eventTime") or ""))
    return found


def _pod(item: dict[str, Any], events: list[dict[str, Any]]) -> PendingWorkload:
    metadata, spec = item.get("metadata") or {}, item.get("spec") or {}
    scheduled: dict[str, Any] = next((c for c in (item.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"), {})
    return PendingWorkload(
        kind="Pod", name=str(metadata.get("name", "")), namespace=str(metadata.get("namespace", "")),
        since=str(metadata.get("creationTimestamp", "")), requests=pod_requests(spec),
        node_selector=dict(spec.get("nodeSelector") or {}),
        has_node_affinity=bool((spec.get("affinity") or {}).get("nodeAffinity")),
        scheduled_reason=str(scheduled.get("reason", "")), scheduled_message=str(scheduled.get("message", "")),
        events=tuple(_event(event) for event in events),
    )


def pending_read(rest: Rest, *, namespace: str, older_than: datetime.timedelta, now: datetime.datetime) -> PendingRead:
    """What waits in ``namespace`` since before ``now - older_than`` (two lists, paged)."""
    base = f"/api/v1/namespaces/{quote(namespace)}"
    pods = _items(rest, f"{base}/pods", {"fieldSelector": "status.phase=Pending"}, f"list Pods in {namespace}")
    events = _events_by_object(_items(rest, f"{base}/events", {}, f"list Events in {namespace}"))
    cutoff = now - older_than
    workloads: list[PendingWorkload] = []
    for item in pods:
        created = _moment((item.get("metadata") or {}).get("creationTimestamp"))
        if created is not None and created <= cutoff and not (item.get("metadata") or {}).get("deletionTimestamp"):
            workloads.append(_pod(item, events.get(("Pod", str(item["metadata"].get("name", ""))), [])))
    for (kind, name), found in sorted(events.items()):
        refusals = [event for event in found if event.get("reason") == "FailedCreate"]
        if kind == "Pod" or not refusals:
            continue
        first = _moment(refusals[0].get("firstTimestamp") or refusals[0].get("eventTime"))
        last = _moment(refusals[-1].get("lastTimestamp") or refusals[-1].get("eventTime"))
        if first is None or last is None or first > cutoff or last < now - REFUSAL_FRESHNESS:
            continue
        workloads.append(PendingWorkload(kind=kind, name=name, namespace=namespace, since=first.isoformat(),
                                         events=tuple(_event(event) for event in refusals)))
    return PendingRead(workloads=tuple(workloads))


def asks_for_mig(read: PendingRead) -> bool:
    return any(name.startswith(MIG_RESOURCE_PREFIX) for workload in read.workloads for name in workload.requests)

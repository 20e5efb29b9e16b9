"""Which pods must go when a namespace's GPU quota is lowered: pure functions, no I/O.

Lowering a ResourceQuota stops new pods; it does nothing to pods already admitted. When a grant
is reclaimed (or released, or expires) while its pods still run, the push lowers the quota and then
evicts, through the Eviction API, the pods beyond it. This module decides which, and in which
order; the drivers carry it out (:mod:`delivery.drivers.kube_evictions`).

The rules:

* Only pods that still hold something count: not ``Succeeded`` or ``Failed``, and not already
  being deleted (a pod evicted by an earlier push is on its way out and no longer counts).
* A quota governs the GPU resources of its ``requests.<domain>/<name>`` keys (extended resources;
  ``requests.cpu`` and ``requests.memory`` are not enforced here). The unscoped quota also
  governs every resource the portal manages (the flavors' resource names) at 0 when it does not
  list it: a namespace must not keep GPUs of a kind it holds no grant for.
* A quota scoped to priority classes (``scopeSelector`` on ``PriorityClass``) governs only the
  pods of those classes. A quota with a scope this module does not understand is left alone
  (enforcing it wrongly would evict pods the cluster itself would admit).
* The scoped quotas are settled first, then the unscoped one: a grant is for its class, so a
  class beyond its own grant gives up its pods before a class within its grant loses one to the
  namespace's total.
* Within a quota and resource, while the pods' requests exceed the limit, pods are evicted in
  order: lowest ``spec.priority`` first, then newest ``creationTimestamp`` first, then by name;
  only pods that request that resource; the first moment the sum fits, eviction stops.
* A pod chosen but not evicted (a PodDisruptionBudget forbids it now) is *not* replaced by the
  next one in line: the choice is made once, as if every chosen pod went, so a budget never
  makes the portal evict a pod of higher priority. The pod is reported as held back and chosen
  again by the next push.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any

from kernel.quantity import parse_quantity

REQUESTS_PREFIX = "requests."
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
PRIORITY_CLASS_SCOPE = "PriorityClass"
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclass(frozen=True)
class PodEviction:
    """A pod chosen for eviction: what it held of the resource whose quota it exceeded.
    ``reason`` says why it is still there when it could not be evicted (held back)."""

    namespace: str
    name: str
    priority: int
    resource: str
    amount: int
    quota: str
    reason: str = ""

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def as_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "pod": self.name, "priority": self.priority, "resource": self.resource, "amount": self.amount,
            "quota": self.quota,
        }
        if self.reason:
            record["reason"] = self.reason
        return record


@dataclass(frozen=True)
class PodUsage:
    """What a live pod holds, as a quota counts it."""

    namespace: str
    name: str
    priority: int = 0
    priority_class: str = ""
    created: datetime.datetime = _EPOCH
    requests: Mapping[str, int] = field(default_factory=dict)

    def eviction_order(self) -> tuple[int, float, str]:
        """Lowest priority first, then the newest, then by name."""
        return self.priority, -self.created.timestamp(), self.name


@dataclass(frozen=True)
class QuotaLimit:
    """A quota's GPU limits. ``scope`` is None for an unscoped quota; otherwise the priority-class
    selector (operator In, NotIn, Exists or DoesNotExist, and its values)."""

    name: str
    hard: Mapping[str, int]
    scope: tuple[str, frozenset[str]] | None = None

    def governs(self, pod: PodUsage) -> bool:
        if self.scope is None:
            return True
        operator, values = self.scope
        if operator == "In":
            return pod.priority_class in values
        if operator == "NotIn":
            return pod.priority_class not in values
        if operator == "Exists":
            return bool(pod.priority_class)
        return not pod.priority_class  # DoesNotExist


def is_gpu_resource(name: str) -> bool:
    """An extended resource (``<domain>/<name>``), as GPUs, MIG slices and shared GPUs are."""
    return "/" in name and not name.startswith("kubernetes.io/")


def _units(value: Any) -> int | None:
    """A quantity as whole units (extended resources are integers); None when unreadable."""
    try:
        amount = parse_quantity(value)
    except (ValueError, TypeError, InvalidOperation):
        return None
    return int(amount.to_integral_value(rounding=ROUND_CEILING)) if isinstance(amount, Decimal) else None


def quota_limit(quota: Mapping[str, Any], *, managed_resources: Iterable[str] = ()) -> QuotaLimit | None:
    """The GPU limits of a desired ResourceQuota, or None when it governs no GPU resource or has
    a scope this module cannot match pods against."""
    spec = quota.get("spec") or {}
    scope: tuple[str, frozenset[str]] | None = None
    expressions = (spec.get("scopeSelector") or {}).get("matchExpressions") or []
    if spec.get("scopes") or len(expressions) > 1:
        return None
    if expressions:
        expression = expressions[0]
        operator = expression.get("operator", "")
        if expression.get("scopeName") != PRIORITY_CLASS_SCOPE or operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return None
        scope = (operator, frozenset(expression.get("values") or ()))
    hard: dict[str, int] = {}
    for key, value in (spec.get("hard") or {}).items():
        resource = key.removeprefix(REQUESTS_PREFIX)
        if key.startswith(REQUESTS_PREFIX) and is_gpu_resource(resource):
            units = _units(value)
            if units is not None:
                hard[resource] = units
    if scope is None:
        for resource in managed_resources:
            hard.setdefault(resource, 0)
    if not hard:
        return None
    return QuotaLimit(name=str(quota.get("metadata", {}).get("name", "")), hard=hard, scope=scope)


def quota_limits(objects: Iterable[Mapping[str, Any]], *, managed_resources: Iterable[str] = ()) -> list[QuotaLimit]:
    """The GPU limits of a namespace's desired objects: its scoped quotas first, the unscoped last."""
    managed = tuple(sorted(set(managed_resources)))
    limits = [
        limit for limit in (quota_limit(obj, managed_resources=managed) for obj in objects if obj.get("kind") == "ResourceQuota")
        if limit is not None
    ]  # fmt: skip
    return sorted(limits, key=lambda limit: (limit.scope is None, limit.name))


def _container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = {**limits, **(resources.get("requests") or {})}  # the API server copies limits to requests
    units: dict[str, int] = {}
    for name, value in requests.items():
        if is_gpu_resource(name):
            amount = _units(value)
            if amount:
                units[name] = amount
    return units


def _add(total: dict[str, int], more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        total[name] = total.get(name, 0) + amount


def pod_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """A pod's effective GPU requests as the quota counts them: its containers and sidecars, or
    its largest init container (with the sidecars started before it) if that is more, plus the
    runtime class's overhead."""
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in spec.get("initContainers") or []:
        wanted = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(sidecars, wanted)
            continue
        running = dict(sidecars)
        _add(running, wanted)
        for name, amount in running.items():
            init_peak[name] = max(init_peak.get(name, 0), amount)
    total = dict(sidecars)
    for container in spec.get("containers") or []:
        _add(total, _container_requests(container))
    for name, amount in init_peak.items():
        total[name] = max(total.get(name, 0), amount)
    _add(total, {name: _units(value) or 0 for name, value in (spec.get("overhead") or {}).items() if is_gpu_resource(name)})
    return {name: amount for name, amount in total.items() if amount > 0}


def _timestamp(value: Any) -> datetime.datetime:
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    try:
        moment = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return _EPOCH
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def pod_usage(pod: Mapping[str, Any]) -> PodUsage | None:
    """What a live pod (the API's JSON) holds; None for a pod that holds nothing any more
    (finished, or already being deleted)."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES or metadata.get("deletionTimestamp"):
        return None
    priority = spec.get("priority")
    return PodUsage(
        namespace=str(metadata.get("namespace", "")),
        name=str(metadata.get("name", "")),
        priority=priority if isinstance(priority, int) else 0,
        priority_class=str(spec.get("priorityClassName") or ""),
        created=_timestamp(metadata.get("creationTimestamp")),
        requests=pod_requests(spec),
    )


def evictions_choose(pods: Sequence[PodUsage], limits: Sequence[QuotaLimit]) -> list[PodEviction]:
    """The pods to evict so that every limit holds, in the order to evict them (module docstring)."""
    ordered = sorted(pods, key=PodUsage.eviction_order)
    gone: set[tuple[str, str]] = set()
    chosen: list[PodEviction] = []
    for limit in limits:
        for resource, hard in sorted(limit.hard.items()):
            holders = [
                pod for pod in ordered
                if (pod.namespace, pod.name) not in gone and pod.requests.get(resource, 0) > 0 and limit.governs(pod)
            ]  # fmt: skip
            used = sum(pod.requests[resource] for pod in holders)
            for pod in holders:
                if used <= hard:
                    break
                amount = pod.requests[resource]
                gone.add((pod.namespace, pod.name))
                chosen.append(PodEviction(pod.namespace, pod.name, pod.priority, resource, amount, limit.name))
                used -= amount
    return chosen

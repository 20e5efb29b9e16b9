"""What would start now instead of a refused request: fewer units, a smaller MIG profile, another
flavor or GPU model, another cluster, each one admission's own verdict on the request so changed
(``planning.admission_decide``), with the quota lines it would use. The earliest later start is
the estimate's (``why_estimate``).

Bounded: the fewest units are found by halving, and at most ``FLAVORS_TRIED`` flavors and
``CLUSTERS_TRIED`` clusters are tried, nearest first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from allocations.admission.planning import Decision
from allocations.booking.preview import candidate_clusters
from allocations.models import Allocation, Flavor, SharingMode
from clusters.models import Cluster

FLAVORS_TRIED = 3
CLUSTERS_TRIED = 2

Decide = Callable[[Allocation], Decision]


def variant(allocation: Allocation, **changes: Any) -> Allocation:
    """The same request (unsaved) with ``changes`` (quantity, flavor, cluster)."""
    fields = {"pk": allocation.pk, "project": allocation.project, "flavor": allocation.flavor,
              "quantity": allocation.quantity, "priority_class": allocation.priority_class,
              "cluster": allocation.cluster, "starts_at": allocation.starts_at, "ends_at": allocation.ends_at,
              "state": allocation.state, "requested_by_id": allocation.requested_by_id}
    fields.update(changes)
    return Allocation(**fields)


def _quota_used(decision: Decision) -> list[dict[str, Any]]:
    """The quota lines the alternative would use (every level on its chain)."""
    keys = ("department", "flavor", "requested", "in_use", "effective_limit")
    return [{key: line.get(key) for key in keys} for line in decision.checks]


def _offer(kind: str, text: str, changed: Allocation, decision: Decision) -> dict[str, Any]:
    cluster = decision.attempt.cluster.name if decision.attempt is not None else None
    return {"kind": kind, "text": text, "flavor": changed.flavor.name, "quantity": changed.quantity,
            "cluster": cluster, "starts_at": None, "quota": _quota_used(decision)}


def fewer_units(allocation: Allocation, decide: Decide) -> dict[str, Any] | None:
    """The most units below the request's that admission would admit now (by halving)."""
    low, high, best = 1, allocation.quantity - 1, None
    while low <= high:
        middle = (low + high) // 2
        changed = variant(allocation, quantity=middle)
        decision = decide(changed)
        if decision.admitted:
            best, low = (changed, decision), middle + 1
        else:
            high = middle - 1
    if best is None:
        return None
    changed, decision = best
    return _offer("fewer-units", f"{changed.quantity} × {changed.flavor.name} would be admitted now.", changed, decision)


def _flavors(allocation: Allocation) -> list[tuple[str, Flavor]]:
    """Smaller MIG profiles of the same GPU model first, then the same way of sharing on another model."""
    flavor = allocation.flavor
    active = list(Flavor.objects.filter(is_active=True).exclude(pk=flavor.pk).order_by("gpu_equivalents", "name"))
    smaller = [("smaller-profile", other) for other in active
               if flavor.sharing_mode == SharingMode.MIG and other.sharing_mode == SharingMode.MIG
               and other.gpu_model == flavor.gpu_model and other.gpu_equivalents < flavor.gpu_equivalents]
    elsewhere = [("other-flavor", other) for other in active
                 if other.gpu_model != flavor.gpu_model and other.sharing_mode == flavor.sharing_mode]
    return (smaller[::-1] + elsewhere)[:FLAVORS_TRIED]


def other_flavors(allocation: Allocation, decide: Decide) -> list[dict[str, Any]]:
    out = []
    for kind, flavor in _flavors(allocation):
        changed = variant(allocation, flavor=flavor, cluster=None)
        decision = decide(changed)
        if decision.admitted:
            out.append(_offer(kind, f"{changed.quantity} × {flavor.name} would be admitted now.", changed, decision))
    return out


def other_clusters(allocation: Allocation, decide: Decide) -> list[dict[str, Any]]:
    """For a request that names its cluster: the other clusters with its GPU model."""
    if allocation.cluster is None:
        return []
    others: list[Cluster] = list(candidate_clusters(flavor=allocation.flavor, cluster=None)
                                 .exclude(pk=allocation.cluster.pk)[:CLUSTERS_TRIED])
    out = []
    for cluster in others:
        changed = variant(allocation, cluster=cluster)
        decision = decide(changed)
        if decision.admitted:
            out.append(_offer("other-cluster", f"On cluster {cluster.name} it would be admitted now.", changed, decision))
    return out


def alternatives_find(*, allocation: Allocation, decide: Decide) -> list[dict[str, Any]]:
    """Every alternative that admission would admit now."""
    found = [fewer_units(allocation, decide)] if allocation.quantity > 1 else []
    out = [offer for offer in found if offer is not None]
    out += other_flavors(allocation, decide)
    out += other_clusters(allocation, decide)
    return out

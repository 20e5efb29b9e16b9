"""Live feedback for a GPU request: GPU-equivalents, quota left, and whether and where it fits.

The quota numbers come from the same admission function that approval uses
(``allocations.admission.quota_checks``); the physical fit from the placement engine's dry run
(``allocations.reservations.placement_attempt``) on each cluster approval would try, in its order,
with the policy approval uses. Everything is read without locks: it describes the moment, and
approval decides again under locks. ``where`` names the cluster, nodes and GPUs the engine would
choose now.

Approval first books the allocations granted before GPU placement existed
(``reservations_adopt``); the dry run stores nothing, so it cannot, and on a cluster that still
has such allocations it may count their GPUs as free. ``ClusterLine.pending_adoption`` says so.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Count, Q

from allocations.admission import quota_checks
from allocations.models import Allocation, Flavor, PriorityClass
from allocations.placement import Policy, default_policy
from allocations.reservations import Booking, placement_attempt, placement_workload
from allocations.states import HOLDING_STATES
from clusters.models import Cluster
from tenants.access import department_ancestor_ids, department_parent_map
from tenants.models import Department, Project


@dataclass(frozen=True)
class QuotaLine:
    department: str
    what: str  # "a100 units" or "GPU-equivalents"
    requested: Decimal
    in_use: Decimal
    limit: Decimal  # effective limit: the quota's limit × the priority class's oversubscription factor

    @property
    def left(self) -> Decimal:
        return self.limit - self.in_use

    @property
    def left_after(self) -> Decimal:
        return self.limit - self.in_use - self.requested

    @property
    def fits(self) -> bool:
        return self.left_after >= 0


FREE_COUNT_LIMIT = 32
"""Free units are counted by placing units one after another; past this many (or the request's
quantity, if larger) the count stops and is shown as "at least"."""


@dataclass(frozen=True)
class ClusterLine:
    """The engine's dry run of the request on one cluster."""

    cluster: str
    gpu_model: str
    requested: int  # units
    fits: bool  # every unit of the request found a place
    placed: int  # units of the request that found a place (all of them when it fits)
    free: int  # units of the flavor that would find a place now, one after another
    free_is_lower_bound: bool  # the count stopped at its limit: at least ``free``
    reason: str  # why the next unit finds no place (empty when it fits)
    where: dict[str, list[str]]  # node name → GPUs the request's units would take ("gpu3", "gpu2@4")
    pending_adoption: int = 0  # holding allocations here not yet booked on GPUs

    @property
    def free_label(self) -> str:
        return f"{self.free}+" if self.free_is_lower_bound else str(self.free)

    @property
    def where_label(self) -> str:
        """``a100-0 gpu0, gpu1; a100-1 gpu5``."""
        return "; ".join(f"{node} {', '.join(gpus)}" for node, gpus in self.where.items())


@dataclass(frozen=True)
class RequestFeedback:
    flavor: Flavor | None = None
    quantity: int | None = None
    gpu_equivalents: Decimal | None = None
    quota: list[QuotaLine] = field(default_factory=list)
    quota_checked: bool = False
    clusters: list[ClusterLine] = field(default_factory=list)
    clusters_checked: bool = False
    where: list[str] = field(default_factory=list)

    @property
    def fits_quota(self) -> bool:
        return self.quota_checked and bool(self.quota) and all(line.fits for line in self.quota)

    @property
    def fits_physically(self) -> bool:
        return any(line.fits for line in self.clusters)

    @property
    def complete(self) -> bool:
        return self.quota_checked and self.clusters_checked


def _department_chain(department_id: int) -> tuple[list[Department], dict[int, int | None]]:
    parents = department_parent_map()
    chain_ids = department_ancestor_ids(department_id=department_id, parents=parents)
    by_id = Department.objects.in_bulk(chain_ids)
    return [by_id[pk] for pk in chain_ids if pk in by_id], parents


def _quota_lines(*, project: Project, flavor: Flavor, quantity: int, priority_class: PriorityClass) -> list[QuotaLine]:
    chain, parents = _department_chain(project.department_id)
    checks = quota_checks(
        chain=chain, parents=parents, flavor=flavor, quantity=quantity, factor=priority_class.oversubscription_factor
    )
    return [
        QuotaLine(
            department=check.department,
            what=f"{check.flavor} units" if check.flavor else "GPU-equivalents",
            requested=check.requested,
            in_use=check.in_use,
            limit=check.effective_limit,
        )
        for check in checks
    ]


def _candidate_clusters(*, flavor: Flavor, cluster: Cluster | None) -> list[Cluster]:
    """The clusters approval would consider, in the order it tries them (as ``allocation_approve``)."""
    if cluster is not None:
        return [cluster]
    return list(
        Cluster.objects.filter(is_active=True, nodes__gpus__model=flavor.gpu_model).distinct().order_by("pk")
    )


def _where(bookings: list[Booking]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for booking in bookings:
        out[booking.node.name].append(booking.label())
    return dict(sorted(out.items()))


def _not_yet_booked(clusters: list[Cluster]) -> dict[int, int]:
    """Per cluster, its holding allocations without any live reservation (what approval adopts first)."""
    legacy = (
        Allocation.objects.filter(cluster__in=clusters, state__in=HOLDING_STATES)
        .annotate(live=Count("reservations", filter=Q(reservations__released_at__isnull=True)))
        .filter(live=0)
        .values_list("cluster_id", flat=True)
    )
    return dict(Counter(cluster_id for cluster_id in legacy if cluster_id is not None))


def _cluster_line(*, cluster: Cluster, flavor: Flavor, quantity: int, policy: Policy, pending_adoption: int) -> ClusterLine:
    # One attempt answers both questions: units are placed one by one, so its first ``quantity``
    # bookings are the request's, and it goes on (up to the limit) to count what else is free.
    target = max(quantity, FREE_COUNT_LIMIT)
    attempt = placement_attempt(cluster=cluster, flavor=flavor, quantity=target, policy=policy)
    placed = min(len(attempt.bookings), quantity)
    fits = placed == quantity
    return ClusterLine(
        cluster=cluster.name,
        gpu_model=flavor.gpu_model,
        requested=quantity,
        fits=fits,
        placed=placed,
        free=len(attempt.bookings),
        free_is_lower_bound=attempt.complete,
        reason="" if fits else attempt.reason,
        where=_where(attempt.bookings[:quantity]) if fits else {},
        pending_adoption=pending_adoption,
    )


def _cluster_lines(*, flavor: Flavor, quantity: int, cluster: Cluster | None) -> list[ClusterLine]:
    candidates = _candidate_clusters(flavor=flavor, cluster=cluster)
    if not candidates:
        return []
    policy_workload = placement_workload(include=flavor)
    waiting = _not_yet_booked(candidates)
    return [
        _cluster_line(
            cluster=candidate, flavor=flavor, quantity=quantity, policy=default_policy(policy_workload),
            pending_adoption=waiting.get(candidate.pk, 0),
        )
        for candidate in candidates
    ]


def request_feedback(
    *,
    project: Project | None,
    flavor: Flavor | None,
    quantity: int | None,
    priority_class: PriorityClass | None,
    cluster: Cluster | None,
) -> RequestFeedback:
    """Everything that can be said about a request from the fields filled in so far."""
    if flavor is None or quantity is None or quantity < 1:
        return RequestFeedback(flavor=flavor, quantity=quantity)
    equivalents = flavor.gpu_equivalents * quantity
    quota: list[QuotaLine] = []
    if project is not None and priority_class is not None:
        quota = _quota_lines(project=project, flavor=flavor, quantity=quantity, priority_class=priority_class)
    clusters = _cluster_lines(flavor=flavor, quantity=quantity, cluster=cluster)
    first_fit = next((line for line in clusters if line.fits), None)
    where = [f"cluster {first_fit.cluster}: {first_fit.where_label}"] if first_fit else []
    return RequestFeedback(
        flavor=flavor,
        quantity=quantity,
        gpu_equivalents=equivalents,
        quota=quota,
        quota_checked=project is not None and priority_class is not None,
        clusters=clusters,
        clusters_checked=True,
        where=where,
    )

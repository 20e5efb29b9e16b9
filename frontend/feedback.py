"""Live feedback for a GPU request: GPU-equivalents, quota left, and whether and where it fits.

The numbers come from the same admission functions that approval uses (``allocations.admission``),
read without locks: they describe the moment, approval re-checks under locks. ``where`` names the
cluster approval would choose today; the placement engine will add node and GPU lines to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from allocations.admission import cluster_capacity_check, quota_checks
from allocations.models import Flavor, PriorityClass
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


@dataclass(frozen=True)
class ClusterLine:
    cluster: str
    gpu_model: str
    requested: Decimal
    free: Decimal
    capacity: Decimal

    @property
    def fits(self) -> bool:
        return self.requested <= self.free


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


def _cluster_lines(*, flavor: Flavor, quantity: int, cluster: Cluster | None) -> list[ClusterLine]:
    lines = []
    for candidate in _candidate_clusters(flavor=flavor, cluster=cluster):
        check = cluster_capacity_check(cluster=candidate, flavor=flavor, quantity=quantity)
        lines.append(
            ClusterLine(
                cluster=check.cluster,
                gpu_model=check.gpu_model,
                requested=check.requested,
                free=max(check.capacity - check.in_use, Decimal(0)),
                capacity=check.capacity,
            )
        )
    return lines


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
    where = [f"cluster {first_fit.cluster}"] if first_fit else []
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

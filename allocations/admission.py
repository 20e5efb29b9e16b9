"""Admission: does an allocation fit its department's quotas and a cluster's capacity?

Called by ``allocation_approve`` after it has locked, in this order, the allocation, the
department chain (primary-key order) and the candidate clusters (primary-key order). Because every
approval in a subtree locks all its ancestors, the sums below cannot change until commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import DecimalField, ExpressionWrapper, F, Q, QuerySet, Sum
from django.db.models.functions import Coalesce

from allocations.models import Allocation, Flavor, Quota
from allocations.states import HOLDING_STATES
from clusters.models import Cluster, Gpu
from gpuportal.errors import CapacityExceeded, QuotaExceeded
from tenants.access import department_subtree_ids
from tenants.models import Department

_GPU_EQ = ExpressionWrapper(F("quantity") * F("flavor__gpu_equivalents"), output_field=DecimalField(max_digits=14, decimal_places=4))


@dataclass(frozen=True)
class QuotaCheck:
    department: str
    flavor: str | None  # None: the department's GPU-equivalent total
    requested: Decimal
    in_use: Decimal
    limit: Decimal
    effective_limit: Decimal  # limit × the priority class's oversubscription factor

    @property
    def fits(self) -> bool:
        return self.in_use + self.requested <= self.effective_limit

    def as_details(self) -> dict[str, str | None]:
        return {
            "department": self.department,
            "flavor": self.flavor,
            "requested": _plain(self.requested),
            "in_use": _plain(self.in_use),
            "limit": _plain(self.limit),
            "effective_limit": _plain(self.effective_limit),
        }


def _plain(value: Decimal) -> str:
    """``4.0000`` → ``4``, ``0.1430`` → ``0.143``."""
    return format(value.normalize(), "f")


def holding_allocations() -> QuerySet[Allocation]:
    return Allocation.objects.filter(state__in=HOLDING_STATES)


def department_usage(*, department_ids: frozenset[int], flavor: Flavor | None) -> Decimal:
    """Units of ``flavor`` (or GPU-equivalents when None) held by projects in these departments."""
    queryset = holding_allocations().filter(project__department_id__in=department_ids)
    if flavor is not None:
        total = queryset.filter(flavor=flavor).aggregate(total=Coalesce(Sum("quantity"), 0))["total"]
        return Decimal(total)
    total = queryset.aggregate(total=Sum(_GPU_EQ))["total"]
    return Decimal(total or 0)


def quota_checks(
    *,
    chain: list[Department],
    parents: dict[int, int | None],
    flavor: Flavor,
    quantity: int,
    factor: Decimal,
) -> list[QuotaCheck]:
    """Every quota on the department chain that applies to this flavor, with its numbers."""
    quotas = Quota.objects.filter(Q(flavor=flavor) | Q(flavor__isnull=True), department__in=chain)
    by_department = {department.pk: department for department in chain}
    checks: list[QuotaCheck] = []
    for quota in quotas.order_by("department_id", "flavor_id"):
        subtree = department_subtree_ids(root_ids=[quota.department_id], parents=parents)
        requested = Decimal(quantity) if quota.flavor_id else Decimal(quantity) * flavor.gpu_equivalents
        in_use = department_usage(department_ids=subtree, flavor=flavor if quota.flavor_id else None)
        checks.append(
            QuotaCheck(
                department=by_department[quota.department_id].slug,
                flavor=flavor.name if quota.flavor_id else None,
                requested=requested,
                in_use=in_use,
                limit=quota.limit,
                effective_limit=(quota.limit * factor).quantize(Decimal("0.0001")),
            )
        )
    return checks


def quota_admit(
    *, chain: list[Department], parents: dict[int, int | None], flavor: Flavor, quantity: int, factor: Decimal
) -> list[QuotaCheck]:
    """Raise ``QuotaExceeded`` unless every applicable quota has room; a flavor without any quota
    on the chain is not granted at all."""
    checks = quota_checks(chain=chain, parents=parents, flavor=flavor, quantity=quantity, factor=factor)
    department = chain[0].slug
    if not checks:
        raise QuotaExceeded(
            f"Department {department} has no quota for {flavor.name} or for GPU-equivalents.",
            details={"department": department, "flavor": flavor.name, "requested": str(quantity), "limit": "0"},
        )
    for check in checks:
        if not check.fits:
            what = f"{check.flavor} units" if check.flavor else "GPU-equivalents"
            raise QuotaExceeded(
                f"Quota exceeded for {what} in department {check.department}: requested {_plain(check.requested)}, "
                f"in use {_plain(check.in_use)}, limit {_plain(check.effective_limit)}.",
                details=check.as_details(),
            )
    return checks


@dataclass(frozen=True)
class CapacityCheck:
    cluster: str
    gpu_model: str
    requested: Decimal
    in_use: Decimal
    capacity: Decimal

    @property
    def fits(self) -> bool:
        return self.in_use + self.requested <= self.capacity


def cluster_capacity_check(*, cluster: Cluster, flavor: Flavor, quantity: int) -> CapacityCheck:
    """A capacity sum in GPU-equivalents over the cluster's GPUs of the flavor's model."""
    gpus = Gpu.objects.filter(node__cluster=cluster, node__is_schedulable=True, model=flavor.gpu_model)
    if flavor.sharing_mode == "mig":
        gpus = gpus.filter(mig_capable=True)
    capacity = Decimal(gpus.count())
    in_use = holding_allocations().filter(cluster=cluster, flavor__gpu_model=flavor.gpu_model).aggregate(
        total=Sum(_GPU_EQ)
    )["total"] or Decimal(0)
    return CapacityCheck(
        cluster=cluster.name,
        gpu_model=flavor.gpu_model,
        requested=Decimal(quantity) * flavor.gpu_equivalents,
        in_use=Decimal(in_use),
        capacity=capacity,
    )


def cluster_choose(*, clusters: list[Cluster], flavor: Flavor, quantity: int) -> Cluster:
    """The first cluster (primary-key order) with room, or ``CapacityExceeded`` with the best numbers."""
    checks = [cluster_capacity_check(cluster=cluster, flavor=flavor, quantity=quantity) for cluster in clusters]
    for cluster, check in zip(clusters, checks, strict=True):
        if check.fits:
            return cluster
    if not checks:
        raise CapacityExceeded(
            f"No active cluster has {flavor.gpu_model} GPUs.",
            details={"gpu_model": flavor.gpu_model, "requested": _plain(Decimal(quantity) * flavor.gpu_equivalents)},
        )
    best = max(checks, key=lambda check: check.capacity - check.in_use)
    free = best.capacity - best.in_use
    raise CapacityExceeded(
        f"Not enough free {flavor.gpu_model} capacity: requested {_plain(best.requested)} GPU-equivalents, "
        f"the most free is {_plain(free)} on cluster {best.cluster}.",
        details={
            "cluster": best.cluster,
            "gpu_model": best.gpu_model,
            "requested": _plain(best.requested),
            "in_use": _plain(best.in_use),
            "limit": _plain(best.capacity),
        },
    )

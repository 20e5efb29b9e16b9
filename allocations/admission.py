"""Admission: does an allocation fit its department's quotas?

Called by ``allocation_approve`` after it has locked, in this order, the allocation, the
department chain (primary-key order) and the candidate clusters (primary-key order). Because every
approval in a subtree locks all its ancestors, the sums below cannot change until commit. Whether
it fits a cluster is the placement engine's answer (``allocations.booking.reservations``).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import DecimalField, ExpressionWrapper, F, Q, QuerySet, Sum
from django.db.models.functions import Coalesce

from allocations.models import Allocation, Flavor, Quota
from allocations.states import HOLDING_STATES
from kernel.errors import QuotaExceeded
from kernel.reads import SharedReads
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


def department_usages(*, scopes: list[tuple[frozenset[int], int | None]]) -> list[Decimal]:
    """What :func:`department_usage` returns for each (department ids, flavor id or None), in one query."""
    if not scopes:
        return []
    totals: dict[str, Any] = {}
    for index, (department_ids, flavor_id) in enumerate(scopes):
        where = Q(project__department_id__in=department_ids)
        if flavor_id is not None:
            totals[f"u{index}"] = Coalesce(Sum("quantity", filter=where & Q(flavor_id=flavor_id)), 0)
        else:
            totals[f"u{index}"] = Sum(_GPU_EQ, filter=where)
    found = holding_allocations().aggregate(**totals)
    return [Decimal(found[f"u{index}"] or 0) for index in range(len(scopes))]


def _chain_quotas(*, chain: list[Department], flavor: Flavor) -> list[Quota]:
    quotas = Quota.objects.filter(Q(flavor=flavor) | Q(flavor__isnull=True), department__in=chain)
    return list(quotas.order_by("department_id", "flavor_id"))


def quota_checks(
    *,
    chain: list[Department],
    parents: dict[int, int | None],
    flavor: Flavor,
    quantity: int,
    factor: Decimal,
    reads: SharedReads | None = None,
) -> list[QuotaCheck]:
    """Every quota on the department chain that applies to this flavor, with its numbers. ``reads``
    shares the quota and usage reads among the checks of many requests (one page's previews)."""
    reads = reads if reads is not None else SharedReads()
    quotas = reads.once(("quotas", tuple(department.pk for department in chain), flavor.pk), _chain_quotas,
                        chain=chain, flavor=flavor)
    by_department = {department.pk: department for department in chain}
    checks: list[QuotaCheck] = []
    for quota in quotas:
        subtree = department_subtree_ids(root_ids=[quota.department_id], parents=parents)
        requested = Decimal(quantity) if quota.flavor_id else flavor.gpu_equivalents_for(quantity)
        counted = flavor if quota.flavor_id else None
        in_use = reads.once(("usage", subtree, counted.pk if counted else None), department_usage,
                            department_ids=subtree, flavor=counted)
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

"""Reads the portal's pages need, built on the apps' tenant-scoped selectors."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count, Q, QuerySet

from allocations.models import Allocation, AllocationState
from allocations.selectors import allocation_list, allocation_may_change, quota_list, quota_usages
from allocations.states import HOLDING_STATES
from clusters.models import Cluster, ClusterPush, Gpu, PushState
from clusters.selectors import cluster_list
from tenants.access import access_for
from tenants.models import Membership, Project
from tenants.selectors import project_list

User = AbstractBaseUser | AnonymousUser


def requestable_projects(*, user: User) -> QuerySet[Project]:
    """Projects the user may request GPUs for: theirs, and every project of departments they administer."""
    access = access_for(user)
    projects = project_list(user=user)
    if access.is_platform_admin:
        return projects
    return projects.filter(Q(members__pk=user.pk) | Q(department_id__in=access.administered)).distinct()


def dashboard_allocations(*, user: User) -> QuerySet[Allocation]:
    """Allocations the user requested, or of projects they are a member of."""
    return allocation_list(user=user).filter(Q(requested_by_id=user.pk) | Q(project__members__pk=user.pk)).distinct()


def allocation_changeable(*, user: User, allocation: Allocation) -> bool:
    """Whether release and renew apply: a live allocation, and the user is its requester, a member
    of its project or an admin of its department (the services enforce the same)."""
    if allocation.state not in (AllocationState.PENDING, *HOLDING_STATES):
        return False
    return allocation_may_change(user=user, allocation=allocation)


def pending_for_decision(*, user: User) -> QuerySet[Allocation]:
    """Pending requests in the departments the user administers."""
    access = access_for(user)
    pending = allocation_list(user=user, state=[AllocationState.PENDING])
    if not access.is_platform_admin:
        pending = pending.filter(project__department_id__in=access.administered)
    return pending.order_by("created_at", "id")


@dataclass(frozen=True)
class QuotaBar:
    """One quota's use, ready to draw: percentages are of the limit, capped at 100."""

    department: str
    flavor: str  # a flavor name, or "GPU-equivalents"
    unit: str
    in_use: Decimal
    guaranteed: Decimal
    limit: Decimal

    @property
    def percent(self) -> Decimal:
        if self.limit <= 0:
            return Decimal(100) if self.in_use > 0 else Decimal(0)
        return min(self.in_use / self.limit * 100, Decimal(100)).quantize(Decimal("0.1"))

    @property
    def guaranteed_percent(self) -> Decimal:
        if self.limit <= 0:
            return Decimal(0)
        return min(self.guaranteed / self.limit * 100, Decimal(100)).quantize(Decimal("0.1"))

    @property
    def over_guarantee(self) -> bool:
        return self.in_use > self.guaranteed

    @property
    def full(self) -> bool:
        return self.in_use >= self.limit


def quota_bars(*, user: User, department_ids: list[int] | None = None) -> list[QuotaBar]:
    """Quota use of the given departments (all the user can read when None)."""
    quotas = quota_list(user=user)
    if department_ids is not None:
        quotas = quotas.filter(department_id__in=department_ids)
    return [
        QuotaBar(
            department=usage.quota.department.slug,
            flavor=usage.quota.flavor.name if usage.quota.flavor else "GPU-equivalents",
            unit="units" if usage.quota.flavor else "GPU-eq.",
            in_use=usage.in_use,
            guaranteed=usage.quota.guaranteed,
            limit=usage.quota.limit,
        )
        for usage in quota_usages(quotas=list(quotas))
    ]


def membership_department_ids(*, user: User) -> list[int]:
    return list(Membership.objects.filter(user_id=user.pk or 0).values_list("department_id", flat=True).distinct())


def holding_by_project(*, user: User, department_ids: list[int] | None) -> QuerySet[Allocation]:
    """Allocations currently holding quota, for a department usage page."""
    holding = allocation_list(user=user, state=list(HOLDING_STATES))
    if department_ids is not None:
        holding = holding.filter(project__department_id__in=department_ids)
    return holding.order_by("project__slug", "flavor__name", "id")


@dataclass(frozen=True)
class ClusterHealth:
    cluster: Cluster
    nodes: int
    gpus: int
    holding: int
    failed: int
    pushes_pending: int
    pushes_failed: int

    @property
    def status(self) -> str:
        if not self.cluster.is_active:
            return "inactive"
        if self.cluster.last_sync_error or self.pushes_failed:
            return "error"
        if self.pushes_pending:
            return "syncing"
        if self.cluster.last_sync_at is None:
            return "never synced"
        return "ok"


def _grouped(queryset: QuerySet[Any], *keys: str) -> dict[tuple[Any, ...], int]:
    rows = queryset.values(*keys).annotate(count=Count("pk")).order_by()
    return {tuple(row[key] for key in keys): row["count"] for row in rows}


def cluster_health_list(*, user: User) -> list[ClusterHealth]:
    """Every cluster with its inventory, what it holds and how delivery to it is going (the outbox).
    Four grouped queries, whatever the number of clusters."""
    clusters = list(cluster_list(user=user))
    ids = [cluster.pk for cluster in clusters]
    gpus = _grouped(Gpu.objects.filter(node__cluster_id__in=ids), "node__cluster_id")
    allocations = _grouped(
        Allocation.objects.filter(cluster_id__in=ids, state__in=HOLDING_STATES), "cluster_id", "state"
    )
    pushes = _grouped(
        ClusterPush.objects.filter(cluster_id__in=ids, state__in=[PushState.PENDING, PushState.FAILED]),
        "cluster_id", "state",
    )
    return [
        ClusterHealth(
            cluster=cluster,
            nodes=getattr(cluster, "node_count", 0),
            gpus=gpus.get((cluster.pk,), 0),
            holding=sum(count for (cluster_id, _), count in allocations.items() if cluster_id == cluster.pk),
            failed=allocations.get((cluster.pk, AllocationState.FAILED), 0),
            pushes_pending=pushes.get((cluster.pk, PushState.PENDING), 0),
            pushes_failed=pushes.get((cluster.pk, PushState.FAILED), 0),
        )
        for cluster in clusters
    ]


def allocation_pushes(*, allocation: Allocation) -> QuerySet[ClusterPush]:
    """Deliveries of this allocation to its cluster (call after ``allocation_get``)."""
    return ClusterPush.objects.filter(allocation=allocation).order_by("-pk")

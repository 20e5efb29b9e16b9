"""Reads the portal's pages need, built on the apps' tenant-scoped selectors."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count, Q, QuerySet
from django.urls import reverse

from allocations.booking.view import node_offers, unit_shape
from allocations.catalogue.selectors import allocation_list, allocation_may_change, quota_list
from allocations.catalogue.states import HOLDING_STATES
from allocations.fair_share.reads import pending_in_queue_order
from allocations.grants.changes import allocation_change_list
from allocations.models import Allocation, AllocationChange, AllocationState, ChangeState, Flavor, Quota
from allocations.quotas.usage import department_usages, quota_usages
from allocations.quotas.wording import quota_scope_name
from clusters.mig_layout import entry_profiles
from clusters.models import Cluster, ClusterPush, Gpu, Node, NodeSharing, PushState
from clusters.selectors import cluster_list
from placement.mig import geometry_for_model
from tenants.access import access_for, department_parent_map, department_subtree_ids
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


def _pinned_offers(node: Node, profile: str) -> bool:
    """Whether a node's pinned MIG layout has instances of ``profile``."""
    return any(profile in entry_profiles(entry) for entry in node.mig_layout or [])


def servable_flavor_ids(*, flavors: Iterable[Flavor]) -> set[int]:
    """The flavors that some active cluster can serve: a schedulable node configured to offer the
    flavor's unit (``allocations.booking.view.node_offers``; a pinned MIG layout offers its
    profiles) with a GPU of its model (for a MIG flavor, a MIG-capable GPU whose geometry has the
    profile), reporting the flavor's driver and CUDA minimums or newer. Two queries, whatever the
    number of flavors, clusters and nodes."""
    nodes = list(
        Node.objects.filter(cluster__is_active=True, is_schedulable=True)
        .select_related("cluster").defer("labels")
    )
    gpus: dict[int, set[tuple[str, int, bool]]] = defaultdict(set)
    for node_id, model, memory, capable in (
        Gpu.objects.filter(node__in=[node.pk for node in nodes])
        .values_list("node_id", "model", "memory_mib", "mig_capable").distinct()
    ):
        gpus[node_id].add((model, memory, capable))
    servable: set[int] = set()
    for flavor in flavors:
        shape = unit_shape(flavor)
        for node in nodes:
            models = [(memory, capable) for model, memory, capable in gpus[node.pk] if model == flavor.gpu_model]
            if not models:
                continue
            if shape.mig_profile is not None:
                carvable = any(
                    capable and (geometry := geometry_for_model(flavor.gpu_model, memory)) is not None
                    and shape.mig_profile in geometry.by_name
                    for memory, capable in models
                )
                pinned = node.sharing == NodeSharing.MIG and bool(node.mig_layout)
                offered = (_pinned_offers(node, shape.mig_profile) and shape.minimums.met_by_node(node)) if pinned \
                    else node_offers(node=node, shape=shape, cluster=node.cluster)
                if carvable and offered:
                    servable.add(flavor.pk)
                    break
            elif node_offers(node=node, shape=shape, cluster=node.cluster):
                servable.add(flavor.pk)
                break
    return servable


def dashboard_allocations(*, user: User) -> QuerySet[Allocation]:
    """Allocations the user requested, or of projects they are a member of."""
    return allocation_list(user=user).filter(Q(requested_by_id=user.pk) | Q(project__members__pk=user.pk)).distinct()


def allocation_changeable(*, user: User, allocation: Allocation) -> bool:
    """Whether release and renew apply: a live allocation, and the user is its requester, a member
    of its project or an admin of its department (the services enforce the same)."""
    if allocation.state not in (AllocationState.PENDING, *HOLDING_STATES):
        return False
    return allocation_may_change(user=user, allocation=allocation)


def pending_for_decision(*, user: User, factors: dict[int, float] | None = None) -> QuerySet[Allocation]:
    """Pending requests in the departments the user administers, oldest first; with ``factors``
    (department id → the fair-share factor of its own projects, ``allocations.fair_share.reads``),
    in the queue's order (``pending_in_queue_order``: the higher priority class, then the
    department least served for its shares, then the oldest). In the database, so that the queue's
    limit keeps the requests that come first."""
    access = access_for(user)
    pending = allocation_list(user=user, state=[AllocationState.PENDING])
    if not access.is_platform_admin:
        pending = pending.filter(project__department_id__in=access.administered)
    if factors is None:
        return pending.order_by("created_at", "id")
    return pending_in_queue_order(pending, factors=factors)


def pending_changes_for_decision(*, user: User) -> QuerySet[AllocationChange]:
    """Pending changes to grants in the departments the user administers, oldest first."""
    access = access_for(user)
    changes = allocation_change_list(user=user, state=ChangeState.PENDING).select_related(
        "allocation__flavor", "allocation__project__department"
    )
    if not access.is_platform_admin:
        changes = changes.filter(allocation__project__department_id__in=access.administered)
    return changes.order_by("created_at", "id")


@dataclass(frozen=True)
class QuotaBar:
    """One quota's use, ready to draw: percentages are of the limit, capped at 100."""

    department: str
    flavor: str  # a flavor name, or "GPU-equivalents"
    unit: str
    in_use: Decimal
    guaranteed: Decimal
    limit: Decimal
    quota_id: int | None = None  # the catalogue's page links each bar to its quota's form

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
    """Quota use of the given departments (all the user can read when None) now: what the grants
    holding now hold, of the numbers the quota windows leave now."""
    quotas = quota_list(user=user)
    if department_ids is not None:
        quotas = quotas.filter(department_id__in=department_ids)
    return [
        QuotaBar(
            department=usage.quota.department.slug,
            flavor=quota_scope_name(usage.quota.flavor),
            unit="units" if usage.quota.flavor else "GPU-eq.",
            in_use=usage.in_use,
            guaranteed=usage.effective_guaranteed,
            limit=usage.effective_limit,
            quota_id=usage.quota.pk,
        )
        for usage in quota_usages(quotas=list(quotas))
    ]


@dataclass(frozen=True)
class PromiseRow:
    """One quota's promises and how they are kept now: what the department holds (its whole
    subtree, scheduled bookings included), the part beyond its guarantee (borrowed: reclaimable
    for a sibling within its own guarantee) and the part of its unused guarantee that others
    borrow (lent)."""

    department: str
    flavor: str  # a flavor name, or "GPU-equivalents"
    unit: str
    guaranteed: Decimal
    limit: Decimal
    lending_limit: Decimal | None  # None: lends all of its unused guarantee
    in_use: Decimal
    borrowed: Decimal
    lent: Decimal

    @property
    def within_guarantee(self) -> Decimal:
        return min(self.in_use, self.guaranteed)

    @property
    def unused_guarantee(self) -> Decimal:
        return max(self.guaranteed - self.in_use, Decimal(0))


def _lendable(guaranteed: Decimal, lending_limit: Decimal | None, in_use: Decimal) -> Decimal:
    unused = max(guaranteed - in_use, Decimal(0))
    return unused if lending_limit is None else min(unused, lending_limit)


def department_promises(*, user: User, department_ids: list[int]) -> list[PromiseRow]:
    """Per quota of these departments: guaranteed, limit, lending limit, held, borrowed and lent.

    Borrowed is what the department holds beyond its guarantee. Lent is an attribution: under the
    parent's quota in the same scope, what the siblings hold beyond their guarantees (and the
    parent's own projects hold) is shared among the siblings that lend, in proportion to what each
    lends (its unused guarantee, at most its lending limit); nothing is lent where the parent has
    no quota in that scope. Four queries, however many quotas and departments."""
    quotas = list(quota_list(user=user).filter(department_id__in=department_ids))
    if not quotas:
        return []
    parents = department_parent_map()
    children: dict[int | None, list[int]] = defaultdict(list)
    for department_id, parent_id in parents.items():
        children[parent_id].append(department_id)
    around = {quota.department_id for quota in quotas}
    for quota in quotas:
        parent = parents.get(quota.department_id)
        if parent is not None:
            around |= {parent, *children[parent]}
    scopes = sorted({quota.flavor_id or 0 for quota in quotas})
    numbers: dict[tuple[int, int | None], tuple[Decimal, Decimal | None]] = {
        (department_id, flavor_id): (guaranteed, lending)
        for department_id, flavor_id, guaranteed, lending in Quota.objects.filter(department_id__in=around)
        .values_list("department_id", "flavor_id", "guaranteed", "lending_limit")
    }
    keys = [(department_id, scope) for department_id in sorted(around) for scope in scopes]
    used = dict(zip(keys, department_usages(scopes=[
        (department_subtree_ids(root_ids=[department_id], parents=parents), scope or None) for department_id, scope in keys
    ]), strict=True))
    rows: list[PromiseRow] = []
    for quota in quotas:
        scope = quota.flavor_id or 0
        in_use = used[(quota.department_id, scope)]
        lent = Decimal(0)
        parent = parents.get(quota.department_id)
        if parent is not None and (parent, quota.flavor_id) in numbers:
            siblings = children[parent]
            terms = {sibling: numbers.get((sibling, quota.flavor_id), (Decimal(0), None)) for sibling in siblings}
            held = {sibling: used[(sibling, scope)] for sibling in siblings}
            own_projects = max(used[(parent, scope)] - sum(held.values(), Decimal(0)), Decimal(0))
            borrowing = own_projects + sum((max(held[s] - terms[s][0], Decimal(0)) for s in siblings), Decimal(0))
            pool = sum((_lendable(terms[s][0], terms[s][1], held[s]) for s in siblings), Decimal(0))
            mine = _lendable(quota.guaranteed, quota.lending_limit, in_use)
            if pool > 0:
                lent = (mine * min(Decimal(1), borrowing / pool)).quantize(Decimal("0.0001"))
        rows.append(PromiseRow(
            department=quota.department.slug,
            flavor=quota_scope_name(quota.flavor),
            unit="units" if quota.flavor else "GPU-eq.",
            guaranteed=quota.guaranteed, limit=quota.limit, lending_limit=quota.lending_limit,
            in_use=in_use, borrowed=max(in_use - quota.guaranteed, Decimal(0)), lent=lent,
        ))
    return rows


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


def allocation_urls(*, user: User, ids: Iterable[int]) -> dict[int, str]:
    """The page of each of these allocations that ``user`` may open (the allocation page's own
    selector decides), in one query; the others are left out."""
    found = allocation_list(user=user).prefetch_related(None).filter(pk__in=set(ids)).values_list("pk", flat=True)
    return {pk: reverse("allocation-detail", args=[pk]) for pk in found}

"""Admission as the database sees it: the quota tree, the grants whose intervals overlap the
request's, and the GPUs, read into :mod:`allocations.quotas.algebra`.

Time-aware: only holding allocations whose ``[starts_at, ends_at)`` overlaps the request's count,
for quota and for GPUs alike; a booking that ends before another starts does not conflict.
Grants already being reclaimed *for this request* count for nothing (they are promised to it).
The quotas are the *effective* ones over the request's interval: the lowest numbers its approved
quota windows leave at any moment of it (``quota_tree``). Each grant carries its department's
fair-share factor (``allocations.fair_share``), read only when grants are (something may be taken):
among victims of equal priority, the department furthest over its share gives first.

Read-only: the preview calls it without locks; approval calls it under its locks (see
``allocations.services``) and acts on the plan.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db.models import Q, Sum

from allocations.booking.policy import placement_policy_for
from allocations.booking.preview import dry_run_key
from allocations.booking.reservations import Attempt, placement_attempt, placement_refusal, placement_workload
from allocations.booking.state import ClusterState, cluster_state
from allocations.booking.tenancy import Tenant, tenant_of
from allocations.booking.view import NodeRow
from allocations.fair_share.reads import fair_share_factors
from allocations.models import Allocation, AllocationState, PreemptionPolicy, Reservation
from allocations.placement import Workload
from allocations.project_caps import project_cap_refusal
from allocations.quotas import algebra
from allocations.quotas.effective_tree import QuotaView, SteppedTree
from allocations.quotas.wording import QuotaWords
from allocations.states import HOLDING_STATES, RECLAIMABLE_STATES
from clusters.models import Cluster
from kernel.clock import clock_now
from kernel.errors import ApplicationError, CapacityExceeded, QuotaExceeded
from kernel.reads import SharedReads
from tenants.access import department_ancestor_ids, department_parent_map, department_subtree_ids
from tenants.models import Department


@dataclass(frozen=True)
class VictimInfo:
    """A grant the request would take, as people read it."""

    allocation_id: int
    project: str
    department: str
    flavor: str
    quantity: int
    priority_class: str
    state: str
    why: str  # borrowed, oversubscribed, lower-priority
    notice_minutes: int

    def as_details(self) -> dict[str, Any]:
        return {
            "allocation": self.allocation_id, "project": self.project, "department": self.department,
            "flavor": self.flavor, "quantity": self.quantity, "priority_class": self.priority_class,
            "state": self.state, "why": self.why, "notice_minutes": self.notice_minutes,
        }


@dataclass
class Decision:
    """What admitting the request now would do."""

    plan: algebra.Plan
    checks: list[dict[str, str | int | None]]
    victims: list[VictimInfo] = field(default_factory=list)
    attempt: Attempt | None = None  # where its units go (admitted only)
    refusal: ApplicationError | None = None

    @property
    def admitted(self) -> bool:
        return self.refusal is None


@dataclass
class _Room:
    """The GPUs of the candidate clusters during the request's interval, each cluster read once,
    when first needed."""

    allocation: Allocation
    clusters: list[Cluster]
    promised: set[int] = field(default_factory=set)
    nodes: dict[int, list[NodeRow]] = field(default_factory=dict)
    rows: dict[int, list[Reservation]] = field(default_factory=dict)
    tried: dict[frozenset[int], list[Attempt]] = field(default_factory=dict)
    workload: Workload | None = None
    tenant: Tenant | None = None
    reads: SharedReads | None = None
    """A page's shared reads, where its placement preview left its dry runs."""
    states: dict[int, ClusterState] = field(default_factory=dict)
    """Each cluster's kept placement state (read when first needed, unless the caller, which holds
    the clusters' rows, gave it)."""

    def read(self, cluster: Cluster) -> None:
        if cluster.pk in self.nodes:
            return
        start, end = self.allocation.starts_at, self.allocation.ends_at
        state = self.states.get(cluster.pk)
        if state is None:
            state = self.states[cluster.pk] = cluster_state(cluster=cluster)
        nodes = state.nodes_of(self.allocation.flavor.gpu_model)
        self.nodes[cluster.pk] = nodes
        # The grants whose interval misses the request's hold nothing it could use; the rest of a
        # holder's rows count, whatever the holder (a row of a non-holding allocation is kept busy).
        elsewhere = set(
            Allocation.objects.filter(cluster_id=cluster.pk, state__in=HOLDING_STATES)
            .filter(Q(starts_at__gte=end) | Q(ends_at__lte=start))
            .values_list("pk", flat=True)
        )
        skip = {self.allocation.pk} | self.promised | elsewhere
        rows = state.rows_of_model(self.allocation.flavor.gpu_model)
        if skip & state.allocations():  # else the state's own list: its kept picture as it is
            rows = [row for row in rows if state.keys[id(row)].allocation not in skip]
        self.rows[cluster.pk] = rows

    def _dry_run(self, cluster: Cluster) -> Attempt | None:
        """The page's dry run of the request on ``cluster`` (``allocations.booking.preview``), when
        it saw exactly these rows: its first units are this attempt."""
        state = self.states[cluster.pk]
        if self.reads is None or self.rows[cluster.pk] is not state.rows_of_model(self.allocation.flavor.gpu_model):
            return None
        dry = self.reads.known(dry_run_key(cluster=cluster, flavor=self.allocation.flavor, tenant=self.tenant))
        return dry.first(self.allocation.quantity) if isinstance(dry, Attempt) else None

    def attempts(self, victims: frozenset[int]) -> list[Attempt]:
        if victims not in self.tried:
            if self.workload is None:
                self.workload = placement_workload(include=self.allocation.flavor)
            if self.tenant is None:
                self.tenant = tenant_of(self.allocation.project)
            found: list[Attempt] = []
            for cluster in self.clusters:
                self.read(cluster)
                dry = None if victims else self._dry_run(cluster)
                attempt = dry or placement_attempt(
                    cluster=cluster, flavor=self.allocation.flavor, quantity=self.allocation.quantity,
                    policy=placement_policy_for(self.allocation.flavor, self.workload), nodes=self.nodes[cluster.pk],
                    reservations=self._without(cluster.pk, victims),
                    tenant=self.tenant, state=self.states[cluster.pk],
                )
                found.append(attempt)
                if attempt.complete:
                    break
            self.tried[victims] = found
        return self.tried[victims]

    def _without(self, cluster_id: int, victims: frozenset[int]) -> list[Reservation]:
        rows = self.rows[cluster_id]
        if not victims:
            return rows
        keys = self.states[cluster_id].keys
        return [row for row in rows if keys[id(row)].allocation not in victims]

    def fits(self, victims: frozenset[int]) -> bool:
        if frozenset() in self.tried and self.tried[frozenset()][-1].complete:
            return True  # taking grants away only frees GPUs
        attempts = self.attempts(victims)
        return bool(attempts) and attempts[-1].complete

    def placed(self, victims: frozenset[int]) -> Attempt | None:
        attempts = self.attempts(victims)
        if attempts and attempts[-1].complete:
            return attempts[-1]
        if victims and self.fits(frozenset()):
            return self.attempts(frozenset())[-1]
        return None

    def on_clusters(self) -> set[int]:
        for cluster in self.clusters:
            self.read(cluster)
        return {row.allocation_id for rows in self.rows.values() for row in rows}


def quota_tree(
    *, parents: dict[int, int | None] | None = None, start: datetime.datetime | None = None,
    end: datetime.datetime | None = None,
) -> algebra.Tree:
    """The quotas as the algebra sees them: over ``[start, end)``, the lowest numbers the approved
    quota windows leave (``effective_tree``); without an interval, the quotas' own."""
    parents = parents if parents is not None else department_parent_map()
    return QuotaView.read(parents=parents, with_windows=start is not None and end is not None).tree(start, end)


def grant_amounts(*, flavor_id: int, quantity: int, gpu_equivalents: Decimal) -> dict[algebra.Scope, Decimal]:
    return {flavor_id: Decimal(quantity), None: (gpu_equivalents * quantity).quantize(Decimal("0.0001"))}


def _holding(
    *, starts_at: datetime.datetime, ends_at: datetime.datetime, department_ids: Iterable[int], exclude: int | None
) -> Any:
    rows = Allocation.objects.filter(
        state__in=HOLDING_STATES, starts_at__lt=ends_at, ends_at__gt=starts_at,
        project__department_id__in=list(department_ids),
    )
    return rows.exclude(pk=exclude) if exclude is not None else rows


def _overlapping(*, allocation: Allocation, department_ids: Iterable[int]) -> Any:
    return _holding(starts_at=allocation.starts_at, ends_at=allocation.ends_at, department_ids=department_ids,
                    exclude=allocation.pk)


def department_totals(
    *, allocation: Allocation, department_ids: Iterable[int], tree: algebra.Tree | None = None
) -> tuple[dict[tuple[int, algebra.Scope], Decimal], set[int]]:
    """What each department's own projects hold per scope over the allocation's interval (grants
    promised to it left out), in one grouped query; and whether any grant is promised to it. With
    a ``tree`` that has classes' shares, the grants of those classes count in the shares too."""
    shares = tree is not None and bool(tree.class_shares)
    group = ["project__department_id", "flavor_id", "flavor__gpu_equivalents", "reclaimed_for_id"]
    rows = (
        _overlapping(allocation=allocation, department_ids=department_ids)
        .values(*group, *(["priority_class_id"] if shares else []))
        .annotate(units=Sum("quantity"))
        .order_by()
    )
    totals: dict[tuple[int, algebra.Scope], Decimal] = defaultdict(Decimal)
    promised: set[int] = set()
    for row in rows:
        if row["reclaimed_for_id"] == allocation.pk:
            promised.add(row["project__department_id"])
            continue
        department = row["project__department_id"]
        amounts = grant_amounts(flavor_id=row["flavor_id"], quantity=row["units"],
                                gpu_equivalents=row["flavor__gpu_equivalents"])
        if tree is not None and shares:
            amounts = tree.class_amounts(department, row["priority_class_id"], amounts)
        for scope, amount in amounts.items():
            totals[(department, scope)] += amount
    return dict(totals), promised


GRANT_FIELDS = (
    "pk", "starts_at", "ends_at", "project__department_id", "project__department__slug", "project__slug", "flavor_id",
    "flavor__name",
    "flavor__gpu_equivalents", "quantity", "priority_class_id", "priority_class__value", "priority_class__name",
    "priority_class__notice_minutes", "priority_class__preemptible", "state", "cluster_id", "reclaimed_for_id",
)


def _grant(
    row: dict[str, Any], *, tree: algebra.Tree | None, takeable: bool, factors: dict[int, float]
) -> algebra.Grant:
    amounts = grant_amounts(flavor_id=row["flavor_id"], quantity=row["quantity"],
                            gpu_equivalents=row["flavor__gpu_equivalents"])
    if tree is not None:
        amounts = tree.class_amounts(row["project__department_id"], row["priority_class_id"], amounts)
    if isinstance(tree, SteppedTree):
        amounts = tree.timed(amounts, row["starts_at"], row["ends_at"])
    return algebra.Grant(
        allocation_id=row["pk"], department_id=row["project__department_id"], amounts=amounts,
        priority=row["priority_class__value"], age=row["pk"], takeable=takeable,
        fair_share=factors.get(row["project__department_id"], 1.0),
    )


def overlapping_grants(
    *, allocation: Allocation, department_ids: Iterable[int], untakeable: Iterable[int] = (),
    tree: algebra.Tree | None = None,
) -> tuple[list[algebra.Grant], dict[int, dict[str, Any]], set[int]]:
    """The holding grants of these departments whose intervals overlap the allocation's, as the
    algebra sees them; their rows by id (for people); and the ids promised to this allocation."""
    blocked = set(untakeable)
    rows = _overlapping(allocation=allocation, department_ids=department_ids).values(*GRANT_FIELDS).order_by("pk")
    grants: list[algebra.Grant] = []
    info: dict[int, dict[str, Any]] = {}
    promised: set[int] = set()
    factors = fair_share_factors(now=clock_now())
    for row in rows:
        if row["reclaimed_for_id"] == allocation.pk:
            promised.add(row["pk"])
            continue
        info[row["pk"]] = dict(row)
        takeable = row["state"] in RECLAIMABLE_STATES and row["pk"] not in blocked
        grants.append(_grant(row, tree=tree, takeable=takeable, factors=factors))
    return grants, info, promised


def grants_at(
    *, at: datetime.datetime, department_ids: Iterable[int], tree: algebra.Tree, untakeable: Iterable[int] = ()
) -> tuple[list[algebra.Grant], dict[int, dict[str, Any]]]:
    """The grants that hold at ``at`` in these departments, less those already being reclaimed
    (they are on their way out), as the algebra sees them, and their rows by id."""
    blocked = set(untakeable)
    rows = (
        _holding(starts_at=at, ends_at=at + datetime.timedelta(microseconds=1), department_ids=department_ids,
                 exclude=None)
        .exclude(state=AllocationState.RECLAIMING).values(*GRANT_FIELDS).order_by("pk")
    )
    info = {row["pk"]: dict(row) for row in rows}
    factors = fair_share_factors(now=clock_now())  # the standing now
    grants = [_grant(row, tree=tree, takeable=row["state"] in RECLAIMABLE_STATES and row["pk"] not in blocked,
                     factors=factors) for row in info.values()]
    return grants, info


def victim_infos(victims: Iterable[algebra.Victim], info: dict[int, dict[str, Any]]) -> list[VictimInfo]:
    """The victims as people read them, from their rows (``overlapping_grants``, ``grants_at``)."""
    return [
        VictimInfo(
            allocation_id=victim.allocation_id,
            project=info[victim.allocation_id]["project__slug"],
            department=info[victim.allocation_id]["project__department__slug"],
            flavor=info[victim.allocation_id]["flavor__name"],
            quantity=info[victim.allocation_id]["quantity"],
            priority_class=info[victim.allocation_id]["priority_class__name"],
            state=info[victim.allocation_id]["state"],
            why=victim.why,
            notice_minutes=0 if info[victim.allocation_id]["priority_class__preemptible"]
            else int(info[victim.allocation_id]["priority_class__notice_minutes"]),
        )
        for victim in victims
    ]


def _capacity_candidates(
    *, tree: algebra.Tree, grants: list[algebra.Grant], ask: algebra.Ask, on_clusters: set[int]
) -> dict[int, str]:
    """Grants whose GPUs the request may take for room: those that oversubscribe (for a request that
    does not, or of higher priority), those that borrow (for a request within its guarantee), and
    lower-priority grants of its own subtree (for a class that preempts)."""
    local = [grant for grant in grants if grant.allocation_id in on_clusters and grant.takeable]
    out: dict[int, str] = {}
    over = algebra.grants_beyond(tree, grants, line="limit")
    for grant in local:
        if grant.allocation_id in over and (ask.factor <= 1 or ask.priority > grant.priority):
            out[grant.allocation_id] = "oversubscribed"
    if algebra.within_guarantee(tree, grants, ask):
        borrowing = algebra.grants_beyond(tree, grants, line="guaranteed")
        for grant in local:
            if grant.allocation_id in borrowing:
                out.setdefault(grant.allocation_id, "borrowed")
    if ask.preempts_lower:
        subtree = tree.subtree(ask.department_id)
        for grant in local:
            if grant.department_id in subtree and grant.priority < ask.priority:
                out.setdefault(grant.allocation_id, "lower-priority")
    return out


def admission_decide(
    *, allocation: Allocation, clusters: list[Cluster], untakeable: Iterable[int] = (),
    states: dict[int, ClusterState] | None = None, workload: Workload | None = None, reads: SharedReads | None = None,
) -> Decision:
    """Would the allocation be admitted now, taking which grants, and where would its units go.
    ``untakeable``: grants that may not be chosen (another transaction holds them). ``states``:
    the clusters' kept placement states, when the caller holds their rows (an approval);
    ``workload``: the placement workload, when the caller has read it already; ``reads``: a page's
    shared reads, whose placement preview's dry runs stand for attempts on every live reservation."""
    flavor = allocation.flavor
    parents = department_parent_map()
    department_id = allocation.project.department_id
    chain = department_ancestor_ids(department_id=department_id, parents=parents)
    view = QuotaView.read(parents=parents)
    tree: algebra.Tree = view.tree(allocation.starts_at, allocation.ends_at)
    names = dict(Department.objects.filter(pk__in=list(parents)).values_list("pk", "slug"))
    words = QuotaWords(tree=tree, names=names, flavor=flavor, priority_class=allocation.priority_class.name)
    amounts = grant_amounts(flavor_id=flavor.pk, quantity=allocation.quantity, gpu_equivalents=flavor.gpu_equivalents)
    ask = algebra.Ask(
        department_id=department_id,
        amounts=tree.class_amounts(department_id, allocation.priority_class_id, amounts),
        priority=allocation.priority_class.value,
        factor=allocation.priority_class.oversubscription_factor,
        preempts_lower=allocation.priority_class.preemption_policy == PreemptionPolicy.PREEMPT_LOWER_PRIORITY,
    )
    refusal: ApplicationError
    capped = project_cap_refusal(allocation=allocation, quantity=allocation.quantity, starts_at=allocation.starts_at,
                                 ends_at=allocation.ends_at)
    if capped is not None:  # the project's own cap (docs/quotas.md, "Project caps"): nothing is reclaimed for it
        return Decision(plan=algebra.Plan(False, (), ()), checks=[], refusal=capped)
    if not any((department, scope) in tree.limits for department in chain for scope in ask.amounts):
        refusal = QuotaExceeded(
            f"Department {names[department_id]} has no quota for {flavor.name} or for GPU-equivalents.",
            details={"department": names[department_id], "flavor": flavor.name,
                     "requested": str(allocation.quantity), "limit": "0"},
        )
        return Decision(plan=algebra.Plan(False, (), ()), checks=[], refusal=refusal)
    tree_ids = department_subtree_ids(root_ids=[chain[-1]], parents=parents)
    totals, promised_anywhere = department_totals(allocation=allocation, department_ids=tree_ids, tree=tree)
    quick = algebra.checks_from_totals(tree, totals, ask)
    if not promised_anywhere and all(check.fits for check in quick):
        # Most approvals: the quota has room. Only the GPUs are asked; grants are read only when
        # something has to be taken.
        room = _Room(allocation=allocation, clusters=clusters, states=dict(states or {}), workload=workload,
                     reads=reads)
        if room.clusters and room.fits(frozenset()):
            attempt = room.placed(frozenset())
            checks = [words.details(check) for check in quick]
            return Decision(plan=algebra.Plan(True, (), tuple(quick)), checks=checks, attempt=attempt)
    stepped = view.stepped(allocation.starts_at, allocation.ends_at)
    if stepped is not None:  # windows change the numbers within the interval: moment by moment, step by step
        tree = stepped
        words = QuotaWords(tree=tree, names=names, flavor=flavor, priority_class=allocation.priority_class.name)
        ask = dataclasses.replace(ask, amounts=stepped.timed(ask.amounts, allocation.starts_at, allocation.ends_at))
    grants, info, promised = overlapping_grants(allocation=allocation, department_ids=tree_ids, untakeable=untakeable,
                                                tree=tree)
    quota_only = algebra.plan(tree, grants, ask)
    if not quota_only.admitted:  # nothing it may take frees enough quota: the GPUs need not be read
        checks = [words.details(check) for check in quota_only.checks]
        return Decision(plan=quota_only, checks=checks, refusal=words.refusal(quota_only.failing[0]))
    room = _Room(allocation=allocation, clusters=clusters, promised=promised, states=dict(states or {}),
                 workload=workload, reads=reads)
    capacity = None
    if room.clusters and not room.fits(frozenset()):
        capacity = _capacity_candidates(tree=tree, grants=grants, ask=ask, on_clusters=room.on_clusters())
    plan = algebra.plan(tree, grants, ask, capacity_fits=room.fits if room.clusters else (lambda _: False),
                        capacity_candidates=capacity)
    checks = [words.details(check) for check in plan.checks]
    if not plan.admitted:
        failing = plan.failing
        if failing:
            refusal = words.refusal(failing[0])
        else:
            refusal = placement_refusal(flavor=flavor, quantity=allocation.quantity, attempts=room.attempts(frozenset()))
        return Decision(plan=plan, checks=checks, refusal=refusal)
    victims = frozenset(victim.allocation_id for victim in plan.victims)
    attempt = room.placed(victims)
    if attempt is None:  # the algebra was told the request fits: it cannot happen, but never book nothing
        refusal = placement_refusal(flavor=flavor, quantity=allocation.quantity, attempts=room.attempts(victims))
        return Decision(plan=plan, checks=checks, refusal=refusal)
    people = victim_infos(plan.victims, info)
    return Decision(plan=plan, checks=checks, victims=people, attempt=attempt)


__all__ = ["CapacityExceeded", "Decision", "VictimInfo", "admission_decide", "grants_at", "quota_tree", "victim_infos"]

"""Admission as the database sees it: the quota tree, the grants whose intervals overlap the
request's, and the GPUs, read into :mod:`allocations.quotas.algebra`.

Time-aware: only holding allocations whose ``[starts_at, ends_at)`` overlaps the request's count,
for quota and for GPUs alike; a booking that ends before another starts does not conflict.
Grants already being reclaimed *for this request* count for nothing (they are promised to it), and
a grant giving back some of its units to it counts only the units it keeps. A grant that a reclaim
under way is making room for is never taken (``reclaim_beneficiaries``); the units a reclaim under
way takes count for every other request until its notice ends, but rank nowhere
(``allocations.quotas.victims``).
The quotas are the *effective* ones over the request's interval: the lowest numbers its approved
quota windows leave at any moment of it (``quota_tree``). Each grant carries its department's
fair-share factor (``allocations.fair_share``), read only when grants are (something may be taken):
among victims of equal priority, the department furthest over its share gives first.

Read-only: the preview calls it without locks; approval calls it under its locks (see
``allocations.grants.services``) and acts on the plan.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, TypeVar

from django.db.models import Case, F, IntegerField, Sum, Value, When
from django.db.models.functions import Coalesce

from allocations.admission.project_caps import project_cap_refusal
from allocations.admission.room import Room
from allocations.booking.attempts import Attempt
from allocations.booking.reservations import placement_refusal
from allocations.booking.state import ClusterState
from allocations.catalogue.states import HOLDING_STATES, RECLAIMABLE_STATES, reclaim_pending_q
from allocations.fair_share.reads import fair_share_factors
from allocations.models import Allocation, AllocationState, PreemptionPolicy
from allocations.quotas import algebra, victims
from allocations.quotas import in_use as timed
from allocations.quotas.effective_tree import QuotaView, SteppedTree, binding_checks
from allocations.quotas.node_room import node_room_plan
from allocations.quotas.usage import DecidedReads
from allocations.quotas.victim_info import VictimInfo, victim_infos
from allocations.quotas.wording import QuotaWords, no_quota_words
from clusters.models import Cluster
from kernel.clock import clock_now
from kernel.errors import ApplicationError, CapacityExceeded, QuotaExceeded
from kernel.reads import SharedReads
from placement import Workload
from tenants.access import DepartmentTree, department_ancestor_ids, department_parent_map, department_subtree_ids
from tenants.models import Department

ZERO = Decimal(0)
T = TypeVar("T")


@dataclass
class Decision:
    """What admitting the request now would do."""

    plan: algebra.Plan
    checks: list[dict[str, str | int | None]]
    victims: list[VictimInfo] = field(default_factory=list)
    attempt: Attempt | None = None  # where its units go (admitted only)
    refusal: ApplicationError | None = None
    # What it was decided on (None when it was refused before the grants were read): a page that
    # shows the checks' segments cuts them from these reads instead of reading them again.
    decided: DecidedReads | None = field(default=None, compare=False, repr=False)

    @property
    def admitted(self) -> bool:
        return self.refusal is None

    @property
    def quota_fits(self) -> list[bool]:
        """Whether the request fits each quota of ``checks`` (in their order): the algebra's own
        verdict on that quota's binding step, the one this decision was made with. A page that
        shows ``checks`` says fits or exceeds from this, never by a rule of its own."""
        return [check.fits for check in binding_checks(self.plan.checks)]


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


def department_rows(*, allocation: Allocation, department_ids: Iterable[int]) -> list[dict[str, Any]]:
    """What each department's own projects hold over the allocation's interval, grouped by what
    admission tells apart (flavor, class, interval, what is promised to it): one query."""
    group = ["project__department_id", "flavor_id", "flavor__gpu_equivalents", "reclaimed_for_id", "priority_class_id",
             "starts_at", "ends_at"]
    staying = Case(When(state=AllocationState.RECLAIMING, then=Value(0)),
                   default=F("quantity") - Coalesce("reclaim_units", Value(0)), output_field=IntegerField())
    return list(
        _overlapping(allocation=allocation, department_ids=department_ids)
        .values(*group).annotate(units=Sum("quantity"), staying=Sum(staying)).order_by()
    )


def held_spans(rows: Iterable[dict[str, Any]]) -> list[timed.Held]:
    """When each row holds (its amount does not matter to where steps are cut)."""
    return [timed.Held(row["starts_at"], row["ends_at"], ZERO) for row in rows]


def interval_tree(view: QuotaView, *, rows: Iterable[dict[str, Any]], start: datetime.datetime,
                  end: datetime.datetime) -> algebra.Tree:
    """The tree a request over ``[start, end)`` is checked against: step by step where a window's
    edge or a grant's start or end (of ``rows``) falls within it, else its lowest numbers."""
    return view.stepped(start, end, held_spans(rows)) or view.tree(start, end)


def in_steps(tree: algebra.Tree, amounts: dict[algebra.Scope, Decimal], starts_at: datetime.datetime,
             ends_at: datetime.datetime) -> dict[algebra.Scope, Decimal]:
    """``amounts`` held over ``[starts_at, ends_at)``, in the steps of a stepped tree it meets."""
    return tree.timed(amounts, starts_at, ends_at) if isinstance(tree, SteppedTree) else amounts


def department_totals(
    *, allocation: Allocation, rows: Iterable[dict[str, Any]], tree: algebra.Tree
) -> tuple[dict[tuple[int, algebra.Scope], Decimal], set[int]]:
    """What each department's own projects hold per scope over the allocation's interval
    (``department_rows``; step by step with a stepped tree: a grant weighs only in the steps it
    holds), what is promised to it left out (a grant reclaimed for it, or the units a grant gives
    back to it); and the departments whose grants promise it something. With a ``tree`` that has
    classes' shares, the grants of those classes count in the shares too."""
    totals: dict[tuple[int, algebra.Scope], Decimal] = defaultdict(Decimal)
    promised: set[int] = set()
    for row in rows:
        department = row["project__department_id"]
        units = row["units"]
        if row["reclaimed_for_id"] == allocation.pk:
            promised.add(department)
            units = row["staying"]
        amounts = grant_amounts(flavor_id=row["flavor_id"], quantity=units,
                                gpu_equivalents=row["flavor__gpu_equivalents"])
        amounts = in_steps(tree, tree.class_amounts(department, row["priority_class_id"], amounts), row["starts_at"],
                           row["ends_at"])
        for scope, amount in amounts.items():
            totals[(department, scope)] += amount
    return dict(totals), promised


GRANT_FIELDS = (
    "pk", "starts_at", "ends_at", "project__department_id", "project__department__slug", "project__slug", "flavor_id",
    "flavor__name",
    "flavor__gpu_equivalents", "quantity", "priority_class_id", "priority_class__value", "priority_class__name",
    "priority_class__notice_minutes", "priority_class__preemptible", "priority_class__oversubscription_factor",
    "state", "cluster_id", "reclaimed_for_id", "reclaim_units",
)


def _leaving(row: dict[str, Any]) -> int:
    """How many of the grant's units a reclaim already under way takes (all of them while reclaiming)."""
    if row["state"] == AllocationState.RECLAIMING:
        return int(row["quantity"])
    return int(row["reclaim_units"] or 0)


def _grant(
    row: dict[str, Any], *, tree: algebra.Tree | None, takeable: bool, factors: dict[int, float], quantity: int | None = None
) -> algebra.Grant:
    units = row["quantity"] if quantity is None else quantity
    amounts = grant_amounts(flavor_id=row["flavor_id"], quantity=units, gpu_equivalents=row["flavor__gpu_equivalents"])
    if tree is not None:
        amounts = in_steps(tree, tree.class_amounts(row["project__department_id"], row["priority_class_id"], amounts),
                           row["starts_at"], row["ends_at"])
    leaving = _leaving(row) if quantity is None else 0
    return algebra.Grant(
        allocation_id=row["pk"], department_id=row["project__department_id"], amounts=amounts,
        priority=row["priority_class__value"], age=row["pk"], takeable=takeable and not leaving,
        fair_share=factors.get(row["project__department_id"], 1.0), units=units, leaving=leaving,
    )


def reclaim_beneficiaries() -> set[int]:
    """The grants that a reclaim under way is making room for: never taken themselves."""
    return set(
        Allocation.objects.filter(reclaim_pending_q()).exclude(reclaimed_for=None)
        .values_list("reclaimed_for_id", flat=True)
    )


def overlapping_grants(
    *, allocation: Allocation, department_ids: Iterable[int], untakeable: Iterable[int] = (),
    tree: algebra.Tree | None = None,
) -> tuple[list[algebra.Grant], dict[int, dict[str, Any]], dict[int, int]]:
    """The holding grants of these departments whose intervals overlap the allocation's, as the
    algebra sees them; their rows by id (for people); and what is promised to this allocation (id
    → how many units: a grant reclaiming for it counts for nothing, one giving back some units to
    it counts only the units it keeps)."""
    blocked = set(untakeable) | reclaim_beneficiaries()
    rows = _overlapping(allocation=allocation, department_ids=department_ids).values(*GRANT_FIELDS).order_by("pk")
    grants: list[algebra.Grant] = []
    info: dict[int, dict[str, Any]] = {}
    promised: dict[int, int] = {}
    factors = fair_share_factors(now=clock_now())
    for row in rows:
        takeable = row["state"] in RECLAIMABLE_STATES and row["pk"] not in blocked
        if row["reclaimed_for_id"] == allocation.pk and _leaving(row):
            promised[row["pk"]] = _leaving(row)
            if _leaving(row) < row["quantity"]:
                grants.append(_grant(row, tree=tree, takeable=False, factors=factors,
                                     quantity=row["quantity"] - _leaving(row)))
            continue
        info[row["pk"]] = dict(row)
        grants.append(_grant(row, tree=tree, takeable=takeable, factors=factors))
    return grants, info, promised


def grants_at(
    *, at: datetime.datetime, department_ids: Iterable[int], tree: algebra.Tree, untakeable: Iterable[int] = ()
) -> tuple[list[algebra.Grant], dict[int, dict[str, Any]]]:
    """The grants that hold at ``at`` in these departments, less those already being reclaimed
    (they are on their way out; a grant giving back some units counts the units it keeps), as the
    algebra sees them, and their rows by id. A grant a reclaim is making room for is never taken."""
    blocked = set(untakeable) | reclaim_beneficiaries()
    rows = (
        _holding(starts_at=at, ends_at=at + datetime.timedelta(microseconds=1), department_ids=department_ids,
                 exclude=None)
        .exclude(state=AllocationState.RECLAIMING).values(*GRANT_FIELDS).order_by("pk")
    )
    info = {row["pk"]: dict(row) for row in rows}
    factors = fair_share_factors(now=clock_now())  # the standing now
    grants = [_grant(row, tree=tree, takeable=row["state"] in RECLAIMABLE_STATES and row["pk"] not in blocked
                     and not row["reclaim_units"], factors=factors, quantity=row["quantity"] - (row["reclaim_units"] or 0))
              for row in info.values()]
    return grants, info


@dataclass(frozen=True)
class _Placing:
    """Where the units may go, as the caller of ``admission_decide`` gave it: the candidate
    clusters, their kept placement states, the placement workload and a page's shared reads."""

    clusters: list[Cluster]
    states: dict[int, ClusterState] | None
    workload: Workload | None
    reads: SharedReads | None

    def room(self, allocation: Allocation, promised: dict[int, int] | None = None) -> Room:
        """The GPUs of the clusters for ``allocation``, with a fresh copy of the kept states;
        ``promised``: the grants whose units a reclaim gives back to it."""
        return Room(allocation=allocation, clusters=self.clusters, promised={} if promised is None else promised,
                    states=dict(self.states or {}), workload=self.workload, reads=self.reads)


@dataclass(frozen=True)
class _Asking:
    """A request the quota tree has limits for, as admission weighs it: the tree over its
    interval, the words for people, what it asks of the algebra and where it may go."""

    allocation: Allocation
    tree: algebra.Tree
    words: QuotaWords
    ask: algebra.Ask
    placing: _Placing


def _shared(reads: SharedReads | None, key: str, read: Callable[[], T]) -> T:
    """``read()``, once per page when the caller shares its reads (the tree of departments, the
    quotas and their windows, the departments' names: the same for every request of the moment)."""
    return reads.once(("admission", key), read) if reads is not None else read()


def admission_reads(*, tree: DepartmentTree) -> SharedReads:
    """Shared reads for ``admission_decide`` that start from a department tree already read (the
    one a request's access check read): a read-only answer reads the tree once."""
    reads = SharedReads()
    reads.once(("admission", "department-parents"), lambda: dict(tree.parents))
    return reads


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
    parents = _shared(reads, "department-parents", department_parent_map)
    department_id = allocation.project.department_id
    chain = department_ancestor_ids(department_id=department_id, parents=parents)
    view = _shared(reads, "quota-view", lambda: QuotaView.read(parents=parents))
    start, end = allocation.starts_at, allocation.ends_at
    names = _shared(reads, "department-slugs",
                    lambda: dict(Department.objects.filter(pk__in=list(parents)).values_list("pk", "slug")))
    amounts = grant_amounts(flavor_id=flavor.pk, quantity=allocation.quantity, gpu_equivalents=flavor.gpu_equivalents)
    capped = project_cap_refusal(allocation=allocation, quantity=allocation.quantity, starts_at=start, ends_at=end)
    if capped is not None:  # the project's own cap (docs/quotas.md, "Project caps"): nothing is reclaimed for it
        return Decision(plan=algebra.Plan(False, (), ()), checks=[], refusal=capped)
    lowest = view.tree(start, end)
    scopes = lowest.class_amounts(department_id, allocation.priority_class_id, amounts)
    if not any((department, scope) in lowest.limits for department in chain for scope in scopes):
        return _no_quota(allocation, department=names[department_id])
    tree_ids = department_subtree_ids(root_ids=[chain[-1]], parents=parents)
    rows = department_rows(allocation=allocation, department_ids=tree_ids)
    decided = DecidedReads(parents=parents, slugs=names, quotas=view.rows, specs=view.specs, rows=rows)
    tree = interval_tree(view, rows=rows, start=start, end=end)  # step by step where what holds or a limit changes
    asking = _Asking(
        allocation=allocation, tree=tree, ask=_ask(allocation, tree, amounts),
        words=QuotaWords(tree=tree, names=names, flavor=flavor, priority_class=allocation.priority_class.name),
        placing=_Placing(clusters=clusters, states=states, workload=workload, reads=reads),
    )
    totals, promised_anywhere = department_totals(allocation=allocation, rows=rows, tree=tree)
    quick = algebra.checks_from_totals(tree, totals, asking.ask)
    if not promised_anywhere and all(check.fits for check in quick):
        # Most approvals: the quota has room. Only the GPUs are asked; grants are read only when
        # something has to be taken.
        room = asking.placing.room(allocation)
        if room.clusters and room.fits(frozenset()):
            attempt = room.placed(frozenset())
            return Decision(plan=algebra.Plan(True, (), tuple(quick)), checks=asking.words.lines(quick), attempt=attempt,
                            decided=decided)
    return replace(_taking(asking, department_ids=tree_ids, untakeable=untakeable), decided=decided)


def _no_quota(allocation: Allocation, *, department: str) -> Decision:
    """The refusal of a request its department and the ones above have no quota for."""
    flavor = allocation.flavor
    refusal = QuotaExceeded(
        no_quota_words(department=department, flavor=flavor.name),
        details={"department": department, "flavor": flavor.name, "requested": str(allocation.quantity), "limit": "0"},
    )
    return Decision(plan=algebra.Plan(False, (), ()), checks=[], refusal=refusal)


def _ask(allocation: Allocation, tree: algebra.Tree, amounts: dict[algebra.Scope, Decimal]) -> algebra.Ask:
    """What the request asks of the algebra: its amounts in the tree's steps, and its priority."""
    priority_class = allocation.priority_class
    department_id = allocation.project.department_id
    return algebra.Ask(
        department_id=department_id,
        amounts=in_steps(tree, tree.class_amounts(department_id, allocation.priority_class_id, amounts),
                         allocation.starts_at, allocation.ends_at),
        priority=priority_class.value,
        factor=priority_class.oversubscription_factor,
        preempts_lower=priority_class.preemption_policy == PreemptionPolicy.PREEMPT_LOWER_PRIORITY,
    )


def _taking(asking: _Asking, *, department_ids: Iterable[int], untakeable: Iterable[int]) -> Decision:
    """The decision once grants are read: what the request would take, if anything frees enough
    quota and GPUs for it, and where its units would go."""
    allocation, tree, words, ask = asking.allocation, asking.tree, asking.words, asking.ask
    grants, info, promised = overlapping_grants(allocation=allocation, department_ids=department_ids,
                                                untakeable=untakeable, tree=tree)
    quota_only = victims.plan(tree, grants, ask)
    if not quota_only.admitted:  # nothing it may take frees enough quota: the GPUs need not be read
        return Decision(plan=quota_only, checks=words.lines(list(quota_only.checks)),
                        refusal=words.refusal(words.worst_failing(list(quota_only.checks))))
    room = asking.placing.room(allocation, promised)
    capacity = None
    if room.clusters and not room.fits(frozenset()):
        capacity = victims.room_facts(tree, grants, ask, local=room.on_clusters())
    plan = victims.plan(tree, grants, ask, capacity_fits=room.fits if room.clusters else (lambda _: False),
                        capacity_candidates=capacity)
    if not plan.admitted and room.clusters:  # quota could be freed (above), the GPUs refused: room on one node
        plan = node_room_plan(tree, grants, ask, units_on=room.units_on(), capacity_fits=room.fits) or plan
    checks = words.lines(list(plan.checks))
    refusal: ApplicationError
    if not plan.admitted:
        if plan.failing:
            refusal = words.refusal(words.worst_failing(list(plan.checks)))
        else:
            refusal = placement_refusal(flavor=allocation.flavor, quantity=allocation.quantity,
                                        attempts=room.attempts(frozenset()))
        return Decision(plan=plan, checks=checks, refusal=refusal)
    cut = frozenset((victim.allocation_id, victim.units) for victim in plan.victims)
    attempt = room.placed(cut)
    if attempt is None:  # the algebra was told the request fits: it cannot happen, but never book nothing
        refusal = placement_refusal(flavor=allocation.flavor, quantity=allocation.quantity, attempts=room.attempts(cut))
        return Decision(plan=plan, checks=checks, refusal=refusal)
    people = victim_infos(plan.victims, info, tree=tree)
    return Decision(plan=plan, checks=checks, victims=people, attempt=attempt)


__all__ = ["CapacityExceeded", "Decision", "VictimInfo", "admission_decide", "grants_at", "quota_tree", "victim_infos"]

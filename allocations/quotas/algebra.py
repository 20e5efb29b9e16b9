"""The admission and reclaim algebra, pure: departments, quotas and grants in; a plan out.

Scopes: every quota counts one *scope*, either the units of one flavor (the flavor's id) or
GPU-equivalents across flavors (``None``). A request or a grant weighs an amount in each scope it
touches. A quota window may limit one priority class's *share* of a quota: that share is a scope of
its own, ``("class", class id, flavor id or None)``, which only that class's grants weigh in
(``Tree.class_amounts``; only under departments that have such a window, to keep it bounded).

What a department holds in a scope (``reserved``): what its own projects use plus what each child
holds, at least the part of its guarantee it does not lend (``guaranteed - lending_limit``; with the
default lending limit, all of the guarantee is lent and a department holds exactly what it uses).
A quota's check: what its department holds, the request included, is at most its ``limit`` times
the request's priority-class oversubscription factor, and never above its ``cap``: the share of a
priority class that a window of that class writes is a hard cap, which no factor raises.

When checks fail, victims may be taken, oversubscribed grants before the others, then lowest
priority first, then (among equal priorities) the department furthest over its fair share first
(``Grant.fair_share``), then newest first, the fewest that make every check pass (greedy, then
pruned so that no victim could be given back):

* **reclaim** (guarantees): when a failing check's department ``P`` has, on the request's path, a
  child ``C`` that the request keeps within its guarantee, grants that *borrow* under ``P`` are
  eligible: grants in another child ``B`` of ``P`` beyond ``B``'s guarantee (ranked by priority,
  then age), and grants of ``P``'s own projects (which no child's guarantee covers). A grant within
  its own department's guarantee is never reclaimed for another department.
* **oversubscription**: grants beyond the plain limit of a department on the request's chain (held
  there by a priority class's factor, or left over after the limit was lowered, unless a quota
  window with shrink policy ``wait`` lowered it: ``Limit.kept``) are eligible for a request that
  does not oversubscribe itself (factor 1) or that has a higher priority.
* **priority preemption**: a request of a ``PreemptLowerPriority`` class may take grants of
  strictly lower priority in its own department's subtree.

Capacity (whether the GPUs are free) is the caller's: ``plan`` takes an optional ``capacity_fits``
callback, asked with the set of victims, so that physical room is reclaimed through the same path.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

ClassScope = tuple[str, int, int | None]
Scope = int | None | tuple[Any, ...]
"""A flavor's id (its units), ``None`` (GPU-equivalents), a priority class's share of either
(``class_scope``), or any of those during one step of time (``allocations.quotas.effective_tree``)."""

ZERO = Decimal(0)


def class_scope(priority_class_id: int, scope: int | None) -> ClassScope:
    return ("class", priority_class_id, scope)


def scope_key(scope: Scope) -> tuple[int, ...]:
    """Flavors first, then GPU-equivalents, then classes' shares (then steps of time, in order)."""
    if isinstance(scope, tuple):
        return (2 if scope[0] == "class" else 3, scope[1], *scope_key(scope[2]))
    return (1,) if scope is None else (0, scope)


@dataclass(frozen=True)
class Limit:
    """One quota: a department's numbers in one scope."""

    department_id: int
    scope: Scope
    guaranteed: Decimal
    limit: Decimal
    lending_limit: Decimal | None = None  # None: lends all of its unused guarantee
    limit_by: int | None = None  # the quota window that set ``limit`` (None: the quota's own)
    kept: Decimal | None = None  # a window lowered the limit but lets what holds beyond it run: taken beyond this
    cap: Decimal | None = None  # a hard cap no oversubscription factor raises (a class's share its own window set)

    def raised(self, factor: Decimal) -> Decimal:
        """The limit a request of this oversubscription factor is checked against."""
        raised = (self.limit * factor).quantize(Decimal("0.0001"))
        return raised if self.cap is None else min(raised, self.cap)

    @property
    def beyond(self) -> Decimal:
        """The line beyond which grants count as oversubscribed (may be taken)."""
        return max(self.limit, self.kept) if self.kept is not None else self.limit

    @property
    def unlent(self) -> Decimal:
        """The part of the guarantee the department keeps for itself even when it does not use it."""
        if self.lending_limit is None:
            return ZERO
        return max(self.guaranteed - self.lending_limit, ZERO)


@dataclass(frozen=True)
class Grant:
    """A holding allocation as admission sees it."""

    allocation_id: int
    department_id: int
    amounts: Mapping[Scope, Decimal]
    priority: int
    age: int  # larger is newer (the allocation's id does)
    takeable: bool = True  # False: already being reclaimed, or locked by another transaction
    fair_share: float = 1.0  # its department's Fair Tree factor (allocations.fair_share): lower is taken first


@dataclass(frozen=True)
class Ask:
    """The request being admitted."""

    department_id: int
    amounts: Mapping[Scope, Decimal]
    priority: int
    factor: Decimal = Decimal(1)
    preempts_lower: bool = False


@dataclass(frozen=True)
class Check:
    """One quota's check, with what the department would hold."""

    department_id: int
    scope: Scope
    holds: Decimal  # what the department holds now (victims removed), without the request
    requested: Decimal
    limit: Decimal
    effective_limit: Decimal

    @property
    def fits(self) -> bool:
        return self.holds + self.requested <= self.effective_limit


@dataclass(frozen=True)
class Victim:
    allocation_id: int
    why: str  # "borrowed", "oversubscribed" or "lower-priority"


@dataclass(frozen=True)
class Plan:
    """The decision: ``admitted`` with ``victims`` (possibly none), or refused, with the checks as
    they stand after every eligible victim was considered (the failing ones say why)."""

    admitted: bool
    victims: tuple[Victim, ...]
    checks: tuple[Check, ...]
    capacity_fits: bool = True

    @property
    def failing(self) -> list[Check]:
        return [check for check in self.checks if not check.fits]


@dataclass
class Tree:
    """Departments (parent map) and their quotas."""

    parents: Mapping[int, int | None]
    limits: Mapping[tuple[int, Scope], Limit]
    children: dict[int, list[int]] = field(default_factory=dict)
    class_shares: frozenset[tuple[int, int, int | None]] = frozenset()  # (department, class, scope) with a share

    def class_amounts(
        self, department_id: int, priority_class_id: int, amounts: Mapping[Scope, Decimal]
    ) -> dict[Scope, Decimal]:
        """``amounts`` and, for each scope a department on the chain limits this class's share of,
        the same amount in that share's scope."""
        out = dict(amounts)
        if self.class_shares:
            chain = self.chain(department_id)
            for scope, amount in amounts.items():
                shared = any((d, priority_class_id, scope) in self.class_shares for d in chain)
                if shared and not isinstance(scope, tuple):
                    out[class_scope(priority_class_id, scope)] = amount
        return out

    def __post_init__(self) -> None:
        kids: dict[int, list[int]] = defaultdict(list)
        for department, parent in self.parents.items():
            if parent is not None:
                kids[parent].append(department)
        self.children = {department: sorted(found) for department, found in kids.items()}

    def chain(self, department_id: int) -> list[int]:
        """The department and its ancestors, nearest first."""
        out: list[int] = []
        current: int | None = department_id
        while current is not None and current not in out:
            out.append(current)
            current = self.parents.get(current)
        return out

    def child_towards(self, ancestor: int, department_id: int) -> int | None:
        """The child of ``ancestor`` on the way down to ``department_id`` (None if it is ``ancestor``)."""
        previous = None
        for node in self.chain(department_id):
            if node == ancestor:
                return previous
            previous = node
        return None

    def subtree(self, department_id: int) -> set[int]:
        out, todo = set(), [department_id]
        while todo:
            node = todo.pop()
            if node not in out:
                out.add(node)
                todo.extend(self.children.get(node, ()))
        return out


class _Holdings:
    """What every department uses directly, per scope, with some grants taken away."""

    def __init__(self, tree: Tree, grants: Iterable[Grant], totals: Mapping[tuple[int, Scope], Decimal] | None = None):
        self.tree = tree
        self.own: dict[tuple[int, Scope], Decimal] = defaultdict(lambda: ZERO)
        for key, amount in (totals or {}).items():
            self.own[key] += amount
        for grant in grants:
            for scope, amount in grant.amounts.items():
                self.own[(grant.department_id, scope)] += amount

    def without(self, grant: Grant) -> None:
        for scope, amount in grant.amounts.items():
            self.own[(grant.department_id, scope)] -= amount

    def with_back(self, grant: Grant) -> None:
        for scope, amount in grant.amounts.items():
            self.own[(grant.department_id, scope)] += amount

    def inner(self, department_id: int, scope: Scope, extra: Mapping[int, Decimal]) -> Decimal:
        """What the department holds before its own unlent guarantee: its projects' use plus what
        its children hold, with ``extra`` (department → amount) added where it lands."""
        total = self.own[(department_id, scope)] + extra.get(department_id, ZERO)
        for child in self.tree.children.get(department_id, ()):
            total += self.reserved(child, scope, extra)
        return total

    def reserved(self, department_id: int, scope: Scope, extra: Mapping[int, Decimal]) -> Decimal:
        inner = self.inner(department_id, scope, extra)
        limit = self.tree.limits.get((department_id, scope))
        return max(inner, limit.unlent) if limit is not None else inner


def _checks(tree: Tree, holdings: _Holdings, ask: Ask) -> list[Check]:
    checks = []
    chain = tree.chain(ask.department_id)
    for scope, amount in sorted(ask.amounts.items(), key=lambda item: scope_key(item[0])):
        for department in chain:
            limit = tree.limits.get((department, scope))
            if limit is None:
                continue
            holds = holdings.inner(department, scope, {})
            requested = holdings.inner(department, scope, {ask.department_id: amount}) - holds
            checks.append(Check(department_id=department, scope=scope, holds=holds, requested=requested,
                                limit=limit.limit, effective_limit=limit.raised(ask.factor)))
    return checks


def checks_from_totals(tree: Tree, totals: Mapping[tuple[int, Scope], Decimal], ask: Ask) -> list[Check]:
    """The checks of ``ask`` from what each department's own projects use per scope (no grant
    detail): enough when nothing needs taking, which is most approvals."""
    return _checks(tree, _Holdings(tree, (), totals), ask)


def _ranked_beyond(grants: list[Grant], *, scope: Scope, line: Decimal) -> set[int]:
    """Ids of the grants that lie (wholly or partly) beyond ``line`` when ranked by priority (highest
    first), then age (oldest first): the ones that do not fit under it."""
    beyond: set[int] = set()
    running = ZERO
    for grant in sorted(grants, key=lambda g: (-g.priority, g.age)):
        amount = grant.amounts.get(scope, ZERO)
        if amount <= 0:
            continue
        running += amount
        if running > line:
            beyond.add(grant.allocation_id)
    return beyond


def eligible_victims(tree: Tree, grants: list[Grant], ask: Ask, failing: list[Check]) -> dict[int, str]:
    """Allocation id → why it may be taken, for the checks that fail."""
    by_department: dict[int, list[Grant]] = defaultdict(list)
    by_id = {grant.allocation_id: grant for grant in grants}
    for grant in grants:
        by_department[grant.department_id].append(grant)

    def in_subtree(root: int) -> list[Grant]:
        return [grant for department in tree.subtree(root) for grant in by_department.get(department, ())]

    holdings = _Holdings(tree, grants)
    eligible: dict[int, str] = {}
    for check in failing:
        scope, level = check.scope, check.department_id
        limit = tree.limits[(level, scope)]
        # Oversubscribed: beyond the level's plain limit.
        for grant_id in _ranked_beyond(in_subtree(level), scope=scope, line=limit.beyond):
            if ask.factor <= 1 or ask.priority > by_id[grant_id].priority:
                eligible.setdefault(grant_id, "oversubscribed")
        # Reclaim: at the failing level and at every level below it on the request's path, a path
        # child that the request keeps within its guarantee takes back what its siblings borrow
        # there (all of it lies in the failing level's subtree, so taking it helps the check).
        amount = ask.amounts.get(scope, ZERO)
        for below in tree.chain(ask.department_id):
            path_child = tree.child_towards(below, ask.department_id)
            if path_child is not None:
                _reclaimable_under(
                    tree, holdings, below, path_child, scope, {ask.department_id: amount}, by_department, eligible
                )
            if below == level:
                break
    if ask.preempts_lower:
        for grant in in_subtree(ask.department_id):
            if grant.priority < ask.priority:
                eligible.setdefault(grant.allocation_id, "lower-priority")
    return {grant_id: why for grant_id, why in eligible.items() if by_id[grant_id].takeable}


def _reclaimable_under(
    tree: Tree, holdings: _Holdings, level: int, path_child: int, scope: Scope, extra: Mapping[int, Decimal],
    by_department: Mapping[int, list[Grant]], eligible: dict[int, str],
) -> None:
    """If the request keeps ``path_child`` within its guarantee, mark what borrows under ``level``:
    grants of ``level``'s own projects, and grants of ``path_child``'s siblings beyond what their
    guarantee leaves after the unlent guarantees of their own children."""
    child_limit = tree.limits.get((path_child, scope))
    if child_limit is None or holdings.inner(path_child, scope, extra) > child_limit.guaranteed:
        return
    for grant in by_department.get(level, ()):
        if grant.amounts.get(scope, ZERO) > 0:
            eligible.setdefault(grant.allocation_id, "borrowed")
    for sibling in tree.children.get(level, ()):
        if sibling == path_child:
            continue
        sibling_limit = tree.limits.get((sibling, scope))
        line = sibling_limit.guaranteed if sibling_limit is not None else ZERO
        members = [grant for department in tree.subtree(sibling) for grant in by_department.get(department, ())]
        used = sum((grant.amounts.get(scope, ZERO) for grant in members), ZERO)
        kept_below = holdings.inner(sibling, scope, {}) - used  # idle guarantees its children do not lend
        for grant_id in _ranked_beyond(members, scope=scope, line=max(line - kept_below, ZERO)):
            eligible.setdefault(grant_id, "borrowed")


def within_guarantee(tree: Tree, grants: list[Grant], ask: Ask) -> bool:
    """Whether the request keeps its department within its guarantee in every scope it touches
    (the nearest department with a quota in that scope answers; none anywhere: not within)."""
    holdings = _Holdings(tree, grants)
    for scope, amount in ask.amounts.items():
        nearest = next((d for d in tree.chain(ask.department_id) if (d, scope) in tree.limits), None)
        if nearest is None:
            continue
        if holdings.inner(nearest, scope, {ask.department_id: amount}) > tree.limits[(nearest, scope)].guaranteed:
            return False
    return True


def grants_beyond(tree: Tree, grants: list[Grant], *, line: str) -> set[int]:
    """Grants beyond the ``line`` (``"guaranteed"``: they borrow; ``"limit"``: they oversubscribe)
    of some quota on their department's chain, in any scope."""
    by_department: dict[int, list[Grant]] = defaultdict(list)
    for grant in grants:
        by_department[grant.department_id].append(grant)
    holdings = _Holdings(tree, grants)
    out: set[int] = set()
    for (department, scope), limit in tree.limits.items():
        members = [g for d in tree.subtree(department) for g in by_department.get(d, ())]
        edge = limit.beyond if line == "limit" else limit.guaranteed
        if line == "guaranteed":  # less what the department's idle teams keep and do not lend
            used = sum((g.amounts.get(scope, ZERO) for g in members), ZERO)
            edge = max(edge - (holdings.inner(department, scope, {}) - used), ZERO)
        out |= _ranked_beyond(members, scope=scope, line=edge)
    return out


def plan(
    tree: Tree,
    grants: list[Grant],
    ask: Ask,
    *,
    capacity_fits: Callable[[frozenset[int]], bool] | None = None,
    capacity_candidates: Mapping[int, str] | None = None,
) -> Plan:
    """Admit ``ask`` against ``grants`` (the holding grants whose intervals overlap the request's),
    taking victims if it needs them and may. ``capacity_fits(victim ids)`` says whether the request
    then fits on the GPUs; ``capacity_candidates`` are the grants (id → why) it may take for room."""
    by_id = {grant.allocation_id: grant for grant in grants}
    holdings = _Holdings(tree, grants)
    checks = _checks(tree, holdings, ask)
    fits_now = capacity_fits(frozenset()) if capacity_fits is not None else True
    if all(check.fits for check in checks) and fits_now:
        return Plan(admitted=True, victims=(), checks=tuple(checks))
    failing = [check for check in checks if not check.fits]
    eligible = eligible_victims(tree, grants, ask, failing) if failing else {}
    if not fits_now and capacity_candidates:
        for grant_id, why in capacity_candidates.items():
            eligible.setdefault(grant_id, why)
    eligible = {grant_id: why for grant_id, why in eligible.items() if grant_id in by_id and by_id[grant_id].takeable}
    failing_keys = [(tree.subtree(check.department_id), check.scope) for check in failing]

    def helps(grant: Grant) -> bool:
        if not fits_now and grant.allocation_id in (capacity_candidates or {}):
            return True
        return any(
            grant.amounts.get(scope, ZERO) > 0 and grant.department_id in subtree for subtree, scope in failing_keys
        )

    order = sorted(
        (by_id[grant_id] for grant_id in eligible),
        key=lambda g: (eligible[g.allocation_id] != "oversubscribed", g.priority, g.fair_share, -g.age,
                       g.allocation_id),
    )
    taken: list[Grant] = []

    def passes() -> tuple[bool, list[Check], bool]:
        now = _checks(tree, holdings, ask)
        room = capacity_fits(frozenset(g.allocation_id for g in taken)) if capacity_fits is not None else True
        return all(check.fits for check in now) and room, now, room

    ok, now, room = False, checks, fits_now
    for grant in order:
        if not helps(grant):
            continue
        taken.append(grant)
        holdings.without(grant)
        ok, now, room = passes()
        if ok:
            break
    if not ok:
        return Plan(admitted=False, victims=(), checks=tuple(now), capacity_fits=room)
    for grant in list(reversed(taken)):  # give back every victim the request can do without
        taken.remove(grant)
        holdings.with_back(grant)
        still, _, _ = passes()
        if not still:
            taken.append(grant)
            holdings.without(grant)
    taken.sort(key=lambda g: order.index(g))
    final = _checks(tree, holdings, ask)
    return Plan(
        admitted=True,
        victims=tuple(Victim(g.allocation_id, eligible[g.allocation_id]) for g in taken),
        checks=tuple(final),
    )

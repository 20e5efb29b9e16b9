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

The plan itself (``allocations.quotas.victims.plan``: the facts that make a grant a victim, the
guarantees and promises that keep one from being taken, and how many of its units must go) builds
on this module. Capacity (whether the GPUs are free) is the caller's: ``plan`` takes an optional
``capacity_fits`` callback, asked with the units it would take, so that physical room is reclaimed
through the same path.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
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
    takeable: bool = True  # False: already being reclaimed, a reclaim's beneficiary, or locked by another transaction
    fair_share: float = 1.0  # its department's Fair Tree factor (allocations.fair_share): lower is taken first
    units: int = 1  # how many units ``amounts`` weigh (each an equal part): a victim may give back some of them
    leaving: int = 0  # units on their way out (a reclaim runs out its notice): counted, but ranked nowhere


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
class Fact:
    """What makes a grant a victim, as it stands when the plan is made: ``why`` (``borrowed``,
    ``oversubscribed``, ``lower-priority``) and ``basis``: ``guarantee`` (the grant lies beyond the
    guarantee of ``department``, whose grants hold ``held`` there against ``line``), ``own-projects``
    (it is held by ``department``'s own projects, which no team's guarantee covers), ``surplus`` (room
    on one node: ``department`` holds ``held`` against a guarantee line ``line``, beyond it by at
    least what its grants there give back, ``allocations.quotas.node_room``), ``limit`` (it
    lies beyond ``department``'s limit: ``held`` against ``line``) or ``priority`` (a request of
    priority ``line`` in ``department``, whose subtree holds it at priority ``held``). ``units``: how
    many of its units may go for it: those beyond a guarantee, all of them for the other bases."""

    why: str
    basis: str
    department_id: int
    scope: Scope | None
    held: Decimal
    line: Decimal
    units: int


@dataclass(frozen=True)
class Victim:
    allocation_id: int
    why: str  # "borrowed", "oversubscribed" or "lower-priority"
    units: int = 1  # how many of its units go (all of them: the whole grant)
    fact: Fact | None = None


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
        # inner() without ``extra``, kept until ``own`` changes: a parent's sum over its children
        # is asked again for every check of every ask (and the twin asks many per instant)
        self._inner: dict[tuple[int, Scope], Decimal] = {}
        self._touches: dict[tuple[int, ...], frozenset[int]] = {}  # extra's departments → their chains
        self._rest: dict[tuple[int, Scope, frozenset[int]], Decimal | None] = {}  # _untouched, until ``own`` changes

    def without(self, grant: Grant) -> None:
        self._inner.clear()
        self._rest.clear()
        for scope, amount in grant.amounts.items():
            self.own[(grant.department_id, scope)] -= amount

    def with_back(self, grant: Grant) -> None:
        self._inner.clear()
        self._rest.clear()
        for scope, amount in grant.amounts.items():
            self.own[(grant.department_id, scope)] += amount

    def inner(self, department_id: int, scope: Scope, extra: Mapping[int, Decimal]) -> Decimal:
        """What the department holds before its own unlent guarantee: its projects' use plus what
        its children hold, with ``extra`` (department → amount) added where it lands."""
        if not extra:
            return self._bare(department_id, scope)
        key = tuple(extra)
        touched = self._touches.get(key)
        if touched is None:
            touched = self._touches[key] = frozenset().union(*(self.tree.chain(landing) for landing in extra))
        return self._with_extra(department_id, scope, extra, touched)

    def _with_extra(self, department_id: int, scope: Scope, extra: Mapping[int, Decimal],
                    touched: frozenset[int]) -> Decimal:
        """``inner`` where ``extra`` lands: a subtree it does not land in sums as without it."""
        if department_id not in touched:
            return self._bare(department_id, scope)
        total = self.own[(department_id, scope)] + extra.get(department_id, ZERO)
        for child in self.tree.children.get(department_id, ()):
            if child in touched:
                total += self._reserve(child, scope, self._with_extra(child, scope, extra, touched))
        rest = self._untouched(department_id, scope, touched)
        return total if rest is None else total + rest

    def _untouched(self, department_id: int, scope: Scope, touched: frozenset[int]) -> Decimal | None:
        """What the children ``extra`` does not land in hold (None: there are none), summed once
        for every ask that lands in the same children. Exact decimals: the same terms added in
        another order give the same number, written the same way."""
        key = (department_id, scope, touched)
        if key not in self._rest:
            terms = [self._reserve(child, scope, self._bare(child, scope))
                     for child in self.tree.children.get(department_id, ()) if child not in touched]
            self._rest[key] = sum(terms[1:], terms[0]) if terms else None
        return self._rest[key]

    def _bare(self, department_id: int, scope: Scope) -> Decimal:
        known = self._inner.get((department_id, scope))
        if known is None:
            known = self.own[(department_id, scope)] + ZERO
            for child in self.tree.children.get(department_id, ()):
                known += self._reserve(child, scope, self._bare(child, scope))
            self._inner[(department_id, scope)] = known
        return known

    def _reserve(self, department_id: int, scope: Scope, inner: Decimal) -> Decimal:
        limit = self.tree.limits.get((department_id, scope))
        return max(inner, limit.unlent) if limit is not None else inner

    def reserved(self, department_id: int, scope: Scope, extra: Mapping[int, Decimal]) -> Decimal:
        return self._reserve(department_id, scope, self.inner(department_id, scope, extra))


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
    return TotalsChecks(tree, totals).checks(ask)


class TotalsChecks:
    """``checks_from_totals`` for many asks against the same tree and totals: what each department
    holds is summed once, not once per ask. The totals are copied: later changes are not seen."""

    def __init__(self, tree: Tree, totals: Mapping[tuple[int, Scope], Decimal]) -> None:
        self.tree = tree
        self._holdings = _Holdings(tree, (), totals)

    def checks(self, ask: Ask) -> list[Check]:
        return _checks(self.tree, self._holdings, ask)

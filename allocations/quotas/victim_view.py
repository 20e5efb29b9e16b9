"""The victim choice's view of the grants (``allocations.quotas.victims``): what each department's
subtree holds, its grants ranked, and how much of each lies beyond a line, counted once per view.

The portal makes a ``View`` from its list of grants for each plan. A caller that keeps the grants
itself as they start, change and end (the policy twin) makes one with ``View.kept`` from what it
keeps (each department's grants, what each holds) and from its previous view, whose rankings and
sums of the departments no change touched are carried over: the same view, made without reading
every grant again.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from decimal import ROUND_CEILING, Decimal
from operator import attrgetter
from typing import Any, TypeVar

from allocations.quotas.algebra import ZERO, Ask, Fact, Grant, Scope, Tree, _Holdings

_AGE, _PRIORITY = attrgetter("age"), attrgetter("priority")
_Key = TypeVar("_Key", bound=tuple[Any, ...])
_Value = TypeVar("_Value")


def staying(grant: Grant, scope: Scope) -> Decimal:
    """What the grant weighs in ``scope`` once its units on their way out are gone."""
    amount = grant.amounts.get(scope, ZERO)
    return amount if grant.leaving <= 0 else amount * (grant.units - grant.leaving) / grant.units


def part(grant: Grant, units: int) -> Grant:
    """The grant's ``units`` units, as a grant of their own (the whole grant for all of them)."""
    if units >= grant.units:
        return grant
    return dataclasses.replace(
        grant, amounts={scope: amount * units / grant.units for scope, amount in grant.amounts.items()}, units=units
    )


def _units_of(grant: Grant, scope: Scope, amount: Decimal) -> int:
    """How many of the grant's units weigh ``amount`` in ``scope`` (rounded up; at least one)."""
    per_unit = grant.amounts[scope] / grant.units
    needed = int((amount / per_unit).to_integral_value(rounding=ROUND_CEILING))
    return max(1, min(needed, grant.units - grant.leaving))


def _carry(mine: dict[_Key, _Value], theirs: Mapping[_Key, _Value], dirty: set[int]) -> None:
    """What ``theirs`` counted of a department (the key's first item) not ``dirty``."""
    mine.update((key, value) for key, value in theirs.items() if key[0] not in dirty)


class View:
    """The grants as the facts read them, with what each department's subtree holds, ranked."""

    def __init__(self, tree: Tree, grants: Iterable[Grant], holdings: _Holdings | None = None):
        """``holdings``: the same grants' holdings, already summed (copied, not changed)."""
        self.tree = tree
        self._grants: list[Grant] | None = list(grants)
        self.by_id = {grant.allocation_id: grant for grant in self._grants}
        self.by_department: Mapping[int, Sequence[Grant]] = defaultdict(list)
        for grant in self._grants:
            self.by_department[grant.department_id].append(grant)  # type: ignore[attr-defined]
        self.holdings = _Holdings(tree, (), holdings.own) if holdings is not None else _Holdings(tree, self._grants)
        self._subtrees: dict[int, set[int]] = {}
        self._ranked: dict[tuple[int, Scope, Decimal], dict[int, Decimal]] = {}
        self._kept: dict[tuple[int, Scope], Decimal] = {}  # idle_kept: the grants never change in a view
        self._held: dict[tuple[int, Scope], Decimal] = {}  # held, for the same reason
        self._own: dict[tuple[int, Scope], Decimal] = {}  # what each department's own grants hold
        self._sorted: dict[tuple[int, Scope], list[tuple[int, Decimal]]] = {}  # beyond's ranking, any line
        self._nearest: dict[tuple[int, Scope], int | None] = {}  # free_units: the quota that protects a grant
        self._facts: dict[tuple[int, Scope, Decimal, str, str], dict[int, Fact]] = {}  # beyond_facts, any line
        self._lower: dict[tuple[int, int], dict[int, Fact]] = {}  # lower_facts, any priority

    @classmethod
    def kept(cls, tree: Tree, by_id: dict[int, Grant], by_department: Mapping[int, Sequence[Grant]],
             totals: Mapping[tuple[int, Scope], Decimal], *, earlier: View | None = None,
             changed: Iterable[int] = ()) -> View:
        """The view of the grants ``by_id`` (in the order the caller lists them), grouped
        ``by_department`` in the same order, with ``totals`` (what each department's own grants
        weigh per scope, all of their units, as ``_Holdings`` sums them). From ``earlier``, a view of
        the same tree, what was counted for a subtree that holds no department of ``changed`` (those
        whose grants started, ended or changed since) is kept. None of the arguments is copied: the
        caller does not change them afterwards."""
        view = cls(tree, ())
        view._grants, view.by_id, view.by_department = None, by_id, by_department
        view.holdings = _Holdings(tree, (), totals)
        if earlier is not None and earlier.tree is tree:
            dirty = {ancestor for department in changed for ancestor in tree.chain(department)}
            view._subtrees, view._nearest = earlier._subtrees, earlier._nearest  # the tree's alone
            _carry(view._ranked, earlier._ranked, dirty)
            _carry(view._facts, earlier._facts, dirty)
            _carry(view._lower, earlier._lower, dirty)
            for mine, theirs in ((view._kept, earlier._kept), (view._held, earlier._held), (view._own, earlier._own)):
                _carry(mine, theirs, dirty)
            _carry(view._sorted, earlier._sorted, dirty)
        return view

    def know_staying(self, staying: Mapping[tuple[int, Scope], Decimal]) -> None:
        """What each department's own grants weigh per scope less their units leaving, from a
        caller that keeps it (instead of a sum over the grants of a department that changed; exact
        decimals, so the same number)."""
        self._own.update(staying)

    @property
    def grants(self) -> list[Grant]:
        if self._grants is None:
            self._grants = list(self.by_id.values())
        return self._grants

    def subtree(self, department_id: int) -> set[int]:
        if department_id not in self._subtrees:
            self._subtrees[department_id] = self.tree.subtree(department_id)
        return self._subtrees[department_id]

    def members(self, department_id: int) -> list[Grant]:
        return [grant for node in self.subtree(department_id) for grant in self.by_department.get(node, ())]

    def held(self, department_id: int, scope: Scope) -> Decimal:
        key = (department_id, scope)
        if key not in self._held:
            self._held[key] = sum((self._own_held(node, scope) for node in self.subtree(department_id)), ZERO)
        return self._held[key]

    def _own_held(self, department_id: int, scope: Scope) -> Decimal:
        """What the department's own grants hold (exact sums: the order they add up in is no matter)."""
        key = (department_id, scope)
        if key not in self._own:
            self._own[key] = sum((staying(grant, scope) for grant in self.by_department.get(department_id, ())), ZERO)
        return self._own[key]

    def idle_kept(self, department_id: int, scope: Scope) -> Decimal:
        """What the department's teams keep of their guarantees and do not lend, beyond their use."""
        key = (department_id, scope)
        if key not in self._kept:
            # what its subtree's grants weigh, all their units: the holdings' own sums (exact decimals)
            used = sum((self.holdings.own[(node, scope)] for node in self.subtree(department_id)), ZERO)
            self._kept[key] = self.holdings.inner(department_id, scope, {}) - used
        return self._kept[key]

    def nearest(self, department_id: int, scope: Scope) -> int | None:
        """The nearest department on the chain with a quota in ``scope``."""
        key = (department_id, scope)
        if key not in self._nearest:
            self._nearest[key] = next((d for d in self.tree.chain(department_id) if (d, scope) in self.tree.limits), None)
        return self._nearest[key]

    def guarantee_line(self, department_id: int, scope: Scope) -> Decimal:
        limit = self.tree.limits.get((department_id, scope))
        line = limit.guaranteed if limit is not None else ZERO
        return max(line - self.idle_kept(department_id, scope), ZERO)

    def beyond(self, department_id: int, scope: Scope, line: Decimal) -> dict[int, Decimal]:
        """How much of each grant of the department's subtree lies beyond ``line`` when they are
        ranked by priority (highest first), then age (oldest first)."""
        key = (department_id, scope, line)
        if key not in self._ranked:
            out: dict[int, Decimal] = {}
            if self.held(department_id, scope) <= line:
                self._ranked[key] = out  # all of it within the line: nothing to rank
                return out
            # The grants beyond the line are the ranking's last ones: walked from the end, each
            # grant's running sum is what the subtree holds less what ranks after it (exact decimals:
            # the same numbers as summed from the start), until one ends within the line.
            ranking, running = self._ranking(department_id, scope), self.held(department_id, scope)
            found: list[tuple[int, Decimal]] = []
            for grant_id, amount in reversed(ranking):
                start = running - amount
                found.append((grant_id, running - max(start, line)))
                if start <= line:
                    break
                running = start
            out.update(reversed(found))
            self._ranked[key] = out
        return self._ranked[key]

    def _ranking(self, department_id: int, scope: Scope) -> list[tuple[int, Decimal]]:
        """The subtree's grants that weigh in ``scope``, ranked, with what each weighs (the same
        for every line)."""
        key = (department_id, scope)
        if key not in self._sorted:
            # by priority, highest first, then age: two stable sorts on plain attributes order them
            # as one sort on (-priority, age) would, ties kept in the same order
            ranked = sorted(self.members(department_id), key=_AGE)
            ranked.sort(key=_PRIORITY, reverse=True)
            self._sorted[key] = [(grant.allocation_id, amount) for grant in ranked
                                 for amount in (grant.amounts.get(scope, ZERO) if grant.leaving <= 0
                                                else staying(grant, scope),) if amount > 0]
        return self._sorted[key]

    def beyond_facts(self, department_id: int, scope: Scope, line: Decimal, *, why: str, basis: str) -> dict[int, Fact]:
        """The grants beyond ``line``: for a guarantee, the units beyond it may go; for a limit, all
        of a grant that lies (wholly or partly) beyond it (the request needs it under the line)."""
        key = (department_id, scope, line, why, basis)
        if key not in self._facts:  # read, never changed, by its callers
            held = self.held(department_id, scope)
            beyond = self.beyond(department_id, scope, line)
            # Only the first grant beyond a guarantee may straddle it: every later one lies wholly
            # beyond, all of its units not leaving (what ``_units_of`` gives it, without dividing).
            # Facts differ only in their units: one (immutable) fact is made for each count.
            first = next(iter(beyond), None)
            made: dict[int, Fact] = {}
            facts: dict[int, Fact] = {}
            for grant_id, amount in beyond.items():
                grant = self.by_id[grant_id]
                units = (_units_of(grant, scope, amount) if basis == "guarantee" and grant_id == first
                         else grant.units - grant.leaving)
                fact = made.get(units)
                if fact is None:
                    fact = made[units] = Fact(why, basis, department_id, scope, held, line, units)
                facts[grant_id] = fact
            self._facts[key] = facts
        return self._facts[key]

    def lower_facts(self, department_id: int, priority: int) -> dict[int, Fact]:
        """The grants of the department's subtree of a priority below ``priority``, each with its
        ``lower-priority`` fact (for a request of a class that preempts; read, never changed)."""
        key = (department_id, priority)
        if key not in self._lower:
            made: dict[tuple[int, int], Fact] = {}  # one (immutable) fact for each priority and count
            facts: dict[int, Fact] = {}
            for grant in self.members(department_id):
                if grant.priority < priority:
                    kind = (grant.priority, grant.units - grant.leaving)
                    fact = made.get(kind)
                    if fact is None:
                        fact = made[kind] = Fact("lower-priority", "priority", department_id, None,
                                                 Decimal(grant.priority), Decimal(priority), kind[1])
                    facts[grant.allocation_id] = fact
            self._lower[key] = facts
        return self._lower[key]

    def free_units(self, grant: Grant, ask: Ask) -> int:
        """How many of the grant's units ``ask`` may take whatever the fact: all of them for a request
        of nothing; otherwise those beyond its department's guarantee in some scope it weighs in (the
        nearest department on its chain with a quota there), or all of them where no such guarantee
        protects it. A guarantee protects against requests from outside its department's subtree
        only: a scope whose nearest quota is held by a department above the request too (a class's
        share at the root, a flavor only the parent limits) neither protects the grant nor frees it."""
        if not any(amount > 0 for amount in ask.amounts.values()):
            return grant.units
        best, covered = 0, False
        for scope, amount in grant.amounts.items():
            nearest = self.nearest(grant.department_id, scope)
            if amount <= 0 or nearest is None or ask.department_id in self.subtree(nearest):
                continue
            covered = True
            beyond = self.beyond(nearest, scope, self.guarantee_line(nearest, scope)).get(grant.allocation_id)
            if beyond is not None:
                best = max(best, _units_of(grant, scope, beyond))
        return best if covered else grant.units

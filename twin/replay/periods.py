"""A request weighed over its period, the portal's way (docs/twin.md, "The replay").

The portal admits a request over ``[starts_at, ends_at)``, its whole period: with the quotas'
windows (``allocations.quotas.stepped.QuotaView``, the pure view admission reads the database
into), the lowest numbers over the period where none of them changes within it, else the tree
step by step, cut where a window's edge or a grant's start or end falls within the period, each
grant weighing only in the steps its own period meets (``SteppedTree.timed``). Here the view is
built from the policy file instead: one quota per department (its guarantee and limit in
GPU-equivalents, numbered as the replay's tree numbers them: the organisation 0, the departments
1..n), each window on its department's quota with its shrink policy: under ``wait`` (the
portal's default) a shrink lets what holds run, and only what holds beyond the limit the other
windows leave may be taken; under ``reclaim`` what holds beyond the lower limit may be taken (and
the replay's edge takes it back: ``engine``).

Where no window's edge falls within a request's period (the common case: no windows, or a period
between two edges), what holds now binds: the grants only end within the period, so the first
step holds the most and the numbers now are the lowest. The replay then keeps its flat picture of
now (``World.held`` against ``tree_at``); only a period that an edge cuts is weighed step by step
(``Periods.weigh``).
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from allocations.quotas import algebra
from allocations.quotas import in_use as timed
from allocations.quotas.stepped import QuotaView, SteppedTree, step_scope, unstepped
from allocations.quotas.windows import WindowSpec
from twin.policy import Policy

ZERO = Decimal(0)


@dataclass(frozen=True)
class Spanned:
    """A grant as the algebra sees it now, its period in seconds of the replay, and its priority
    class's number (where a window sets the class's share, the grant counts in it too)."""

    grant: algebra.Grant
    since: float
    until: float
    class_id: int | None = None


class _Weights:
    """What each grant weighs over the period's steps, made once when the victim choice first asks
    (the quota checks need only the totals), shared by every copy of a picture (``Periods.asking``)."""

    def __init__(self, tree: algebra.Tree, found: list[Spanned], spans: list[tuple[datetime.datetime, datetime.datetime]]):
        self._tree, self._found, self._spans = tree, found, spans
        self._grants: list[algebra.Grant] | None = None

    def grants(self) -> list[algebra.Grant]:
        if self._grants is None:
            tree = self._tree
            self._grants = [
                dataclasses.replace(item.grant, amounts=tree.timed(item.grant.amounts, since, until))
                if isinstance(tree, SteppedTree) else item.grant
                for item, (since, until) in zip(self._found, self._spans, strict=True)
            ]
        return self._grants


@dataclass(frozen=True)
class Weighed:
    """A request over its period: the tree step by step, what each grant weighs in it, what each
    department holds per step and what the request asks per step."""

    tree: algebra.Tree
    weights: _Weights
    totals: dict[tuple[int, algebra.Scope], Decimal]
    ask: algebra.Ask
    begun: bool = False  # every grant began by the period's start: what holds only ends within it

    @property
    def grants(self) -> list[algebra.Grant]:
        return self.weights.grants()

    def quota_fits(self) -> bool:
        """The portal's quota checks: the request fits every step of its period.

        Where every grant began by the period's start, only the steps whose numbers differ from
        the step before are checked: in a run of steps with the same numbers, what holds in a
        later step is part of what holds in the first (a grant there began before it and ends
        after it), and the request is in all of them, so the first binds. The same answer."""
        ask, tree, totals = self.ask, self.tree, self.totals
        if self.begun and isinstance(tree, SteppedTree) and len(tree.changes) < len(tree.steps):
            binding = set(tree.changes)
            ask = dataclasses.replace(ask, amounts={
                scope: amount for scope, amount in ask.amounts.items() if unstepped(scope)[1] in binding})
            totals = {key: amount for key, amount in totals.items() if unstepped(key[1])[1] in binding}
        return all(check.fits for check in algebra.checks_from_totals(tree, totals, ask))


def _begun_totals(tree: SteppedTree, found: list[Spanned], spans: list[tuple[datetime.datetime, datetime.datetime]],
                  ) -> dict[tuple[int, algebra.Scope], Decimal]:
    """What each department holds per step where every grant began by the first step: a grant
    weighs in the steps from the first up to the last one it meets, so each step's total is what
    the grants ending after it weigh, summed from the last step back (exact decimals: the same
    terms in another order give the same number, written the same way)."""
    begins = [begin for begin, _ in tree.steps]
    ending: dict[tuple[int, algebra.Scope], dict[int, Decimal]] = defaultdict(dict)
    for item, (_, until) in zip(found, spans, strict=True):
        last = bisect.bisect_left(begins, until)  # the steps it meets: 0 .. last - 1
        for scope, amount in item.grant.amounts.items():
            at = ending[(item.grant.department_id, scope)]
            at[last] = at[last] + amount if last in at else amount
    totals: dict[tuple[int, algebra.Scope], Decimal] = {}
    for (department_id, scope), at in ending.items():
        running: Decimal | None = None
        for step in range(max(at), 0, -1):
            if step in at:
                running = at[step] if running is None else running + at[step]
            if running is not None:
                totals[(department_id, step_scope(step - 1, scope))] = ZERO + running
    return totals


class Periods:
    """The policy's quotas and windows as the portal's view, and the edges where numbers change."""

    def __init__(self, policy: Policy, tree: algebra.Tree, edges: Iterable[float]) -> None:
        self.start = policy.start
        index = {d.name: k for k, d in enumerate(policy.departments, start=1)}
        # each quota's id: a department's its number; a department's quota of a flavor one after them
        quota_ids: dict[tuple[int, algebra.Scope], int] = {(department, None): department
                                                           for department, scope in tree.limits if scope is None}
        first = max(tree.parents) + 1
        quota_ids |= {key: first + k for k, key in enumerate(key for key in tree.limits if isinstance(key[1], int))}
        rows = [(quota_id, department, scope, tree.limits[(department, scope)].guaranteed,
                 tree.limits[(department, scope)].limit, None) for (department, scope), quota_id in quota_ids.items()]
        flavors = policy.flavor_numbers
        specs: dict[int, list[WindowSpec]] = defaultdict(list)
        for rule in policy.windows:
            scope = flavors[rule.flavor] if rule.flavor is not None else None
            specs[quota_ids[(index[rule.department], scope)]].append(policy.window_spec(rule))
        self.view = QuotaView(parents=dict(tree.parents), rows=list(rows), specs=dict(specs),
                              waiting=frozenset(rule.spec.id for rule in policy.windows if rule.shrink_policy == "wait"))
        self.edges = sorted({at for at in edges if at > 0})

    def at(self, seconds: float) -> datetime.datetime:
        return self.start + datetime.timedelta(seconds=seconds)

    def crosses(self, start: float, end: float) -> bool:
        """Whether a window changes a number strictly within ``(start, end)``."""
        found = bisect.bisect_right(self.edges, start)
        return found < len(self.edges) and self.edges[found] < end

    def tree_at(self, seconds: float) -> algebra.Tree:
        """The numbers in force at an instant (with what a ``wait`` shrink lets run)."""
        moment = self.at(seconds)
        return self.view.tree(moment, moment + timed.INSTANT)

    def weigh(self, ask: algebra.Ask, start: float, end: float, grants: Iterable[Spanned], *,
              class_id: int | None = None) -> Weighed:
        """``ask`` (of priority class ``class_id``) over ``[start, end)`` next to ``grants``, each
        over its own period, as admission weighs it (``planning.interval_tree``,
        ``department_totals``, ``_grant``, ``_ask``)."""
        return self.asking(self.picture(start, end, grants), ask, start, end, class_id=class_id)

    def picture(self, start: float, end: float, grants: Iterable[Spanned]) -> Weighed:
        """The tree over ``[start, end)`` and the grants in its steps (asking nothing yet); where
        a class's share is in force over it, a grant of the class counts in the share too
        (``algebra.Tree.class_amounts``, as admission counts it)."""
        found = [item for item in grants if item.since < end and item.until > start]
        begin, finish = self.at(start), self.at(end)
        spans = [(self.at(item.since), self.at(item.until)) for item in found]
        tree = self.view.stepped(begin, finish, [timed.Held(a, b, ZERO) for a, b in spans]) or self.view.tree(begin, finish)
        if tree.class_shares:
            found = [dataclasses.replace(item, grant=dataclasses.replace(item.grant, amounts=tree.class_amounts(
                item.grant.department_id, item.class_id or 0, item.grant.amounts))) for item in found]
        weights = _Weights(tree, found, spans)
        begun = all(item.since <= start for item in found)
        if begun and isinstance(tree, SteppedTree):
            return Weighed(tree, weights, _begun_totals(tree, found, spans), algebra.Ask(0, {}, 0), begun)
        totals: dict[tuple[int, algebra.Scope], Decimal] = defaultdict(Decimal)
        for grant in weights.grants():
            for scope, amount in grant.amounts.items():
                totals[(grant.department_id, scope)] += amount
        return Weighed(tree, weights, dict(totals), algebra.Ask(0, {}, 0), begun)

    def asking(self, picture: Weighed, ask: algebra.Ask, start: float, end: float, *,
               class_id: int | None = None) -> Weighed:
        """``picture`` with ``ask`` (of priority class ``class_id``) over ``[start, end)`` in its
        steps, in its class's share too where one is in force."""
        tree = picture.tree
        amounts = tree.class_amounts(ask.department_id, class_id or 0, ask.amounts) if tree.class_shares else ask.amounts
        amounts = tree.timed(amounts, self.at(start), self.at(end)) if isinstance(tree, SteppedTree) else amounts
        return dataclasses.replace(picture, ask=dataclasses.replace(ask, amounts=amounts))

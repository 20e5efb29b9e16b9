"""Room on one node, pure: when a request within its guarantee, whose quotas the victims it may take
would let it in, finds no victims that leave a place for its units (``victims.plan`` refused for
the GPUs), the victims are chosen node by node (``docs/quotas.md``, "Room on one node").

``victims.plan`` frees grants, not nodes: a guarantee protects a department's grants ranked first
(highest priority, then oldest), wherever they run, so a unit of several whole GPUs may find no node
whose every unit may be taken although the departments on it together hold far beyond their
guarantees. A guarantee promises an amount, not particular grants: here, on each node, every
grant with units there of a department outside the request's subtree gives back its units from
its first one on that node to its last (the last units leave first, as a partial reclaim gives them
back); the node may be emptied so when no department gives back more than it holds beyond its
guarantee line (``View.guarantee_line``: what stays is still at least its guarantee), every grant
is takeable, and every quota check of the request passes once they are gone. Among the nodes where the request then fits (``capacity_fits``), the one that
takes the fewest GPU-equivalents wins, then the node's key. Each victim's fact is ``borrowed`` on
the basis ``surplus``: its department held ``held`` against a guarantee line of ``line``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from decimal import Decimal

from allocations.quotas.algebra import ZERO, Ask, Fact, Grant, Plan, Scope, Tree, Victim, _checks, _Holdings
from allocations.quotas.victims import Cut, View, part, within_guarantee

NodeKey = Hashable


def _by_node(view: View, ask: Ask, units_on: Mapping[int, Sequence[NodeKey]]) -> dict[NodeKey, dict[int, int]]:
    """Node → (grant id → the units it gives back to empty the node): from each grant's first
    unit there to its last unit not already leaving."""
    mine = view.subtree(ask.department_id)
    out: dict[NodeKey, dict[int, int]] = defaultdict(dict)
    for grant_id, nodes in units_on.items():
        grant = view.by_id.get(grant_id)
        if grant is None or grant.department_id in mine:
            continue
        live = list(nodes)[: grant.units - grant.leaving]
        for index, node in enumerate(live):
            out[node].setdefault(grant_id, len(live) - index)
    return out


def _surplus(view: View, scope: Scope, department_id: int) -> Decimal:
    """What a department holds beyond its guarantee line (the nearest quota in ``scope`` on its chain)."""
    nearest = next((d for d in view.tree.chain(department_id) if (d, scope) in view.tree.limits), None)
    if nearest is None:
        return ZERO
    return view.held(nearest, scope) - view.guarantee_line(nearest, scope)


def _spends(view: View, takes: Mapping[int, int], scopes: Sequence[Scope]) -> bool:
    """Whether every department stays at or above its guarantee line once ``takes`` are gone."""
    spent: dict[tuple[int, Scope], Decimal] = defaultdict(lambda: ZERO)
    for grant_id, units in takes.items():
        grant = view.by_id[grant_id]
        if not grant.takeable:
            return False
        for scope in scopes:
            amount = part(grant, units).amounts.get(scope, ZERO)
            if amount <= 0:
                continue
            nearest = next((d for d in view.tree.chain(grant.department_id) if (d, scope) in view.tree.limits), None)
            if nearest is not None:
                spent[(nearest, scope)] += amount
    return all(amount <= _surplus(view, scope, department) for (department, scope), amount in spent.items())


def node_room_plan(
    tree: Tree,
    grants: list[Grant],
    ask: Ask,
    *,
    units_on: Mapping[int, Sequence[NodeKey]],
    capacity_fits: Callable[[Cut], bool],
    view: View | None = None,
) -> Plan | None:
    """The victims that empty one node for ``ask`` (see the module's docstring), or None where the
    request is not within its guarantee or no node can be emptied for it.
    ``units_on``: grant id → the node of each of its units, in order (the last leave first).
    ``view``: a ``View`` of the same tree and grants, if the caller keeps one (read, not changed)."""
    view = view if view is not None and view.tree is tree else View(tree, grants)
    if not within_guarantee(view, ask):
        return None
    scopes = sorted({scope for grant in grants for scope in grant.amounts}, key=str)
    found: tuple[Decimal, str, dict[int, int]] | None = None
    for node, takes in _by_node(view, ask, units_on).items():
        weight = sum((part(view.by_id[g], units).amounts.get(None, ZERO) for g, units in takes.items()), ZERO)
        if found is not None and (weight, str(node)) >= found[:2]:
            continue
        if _spends(view, takes, scopes) and _quota_passes(view, ask, takes) and \
                capacity_fits(frozenset(takes.items())):
            found = (weight, str(node), takes)
    if found is None:
        return None
    ranked = sorted(found[2], key=lambda g: (view.by_id[g].priority, view.by_id[g].fair_share, -view.by_id[g].age, g))
    victims = tuple(Victim(g, "borrowed", found[2][g], _fact(view, view.by_id[g])) for g in ranked)
    return Plan(admitted=True, victims=victims, checks=tuple(_checks(tree, _Holdings(tree, (), view.holdings.own), ask)))


def _quota_passes(view: View, ask: Ask, takes: Mapping[int, int]) -> bool:
    """Whether every quota check of ``ask`` passes once ``takes`` are gone (they are counted until
    their notice ends, as any victim's)."""
    holdings = _Holdings(view.tree, (), view.holdings.own)
    for grant_id, units in takes.items():
        holdings.without(part(view.by_id[grant_id], units))
    return all(check.fits for check in _checks(view.tree, holdings, ask))


def _fact(view: View, grant: Grant) -> Fact:
    scope = None if None in grant.amounts else next(iter(sorted(grant.amounts, key=str)), None)
    nearest = next((d for d in view.tree.chain(grant.department_id) if (d, scope) in view.tree.limits),
                   grant.department_id)
    return Fact("borrowed", "surplus", nearest, scope, view.held(nearest, scope), view.guarantee_line(nearest, scope),
                grant.units - grant.leaving)


__all__ = ["node_room_plan"]

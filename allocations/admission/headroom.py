"""The room each quota that binds a department's requests leaves now, by admission's own rule.

A request of a department's project must fit every quota on its department's chain: the
department's own and each ancestor's (``algebra.Tree.chain``), in the flavor's units and in
GPU-equivalents. This reads them as ``planning.admission_decide`` does, with the same pieces: the
quota tree with the numbers the approved windows leave (``QuotaView``), what each department's own
projects hold (``planning.grant_amounts``), and the algebra's checks
(``algebra.checks_from_totals``: what a department holds is its projects' grants plus what each
child holds, a child at least at the part of its guarantee it does not lend), for a request that
asks nothing. So a level the dashboard shows with little room is the one admission finds full.

At an instant (``at``, default now): the grants that hold then, the numbers in force then, and the
limit a request of the standard factor (1) is checked against. A request is judged over its own
dates and with its priority class's factor (``admission_decide``); this says where the room is
now, and decides nothing. Six queries, however many departments.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Sum

from allocations.admission.planning import grant_amounts
from allocations.models import Flavor
from allocations.quotas import algebra
from allocations.quotas.effective_tree import QuotaView
from allocations.quotas.usage import holding_at
from allocations.quotas.wording import scope_words
from kernel.clock import clock_now
from tenants.access import department_parent_map, department_subtree_ids
from tenants.models import Department

ZERO = Decimal(0)
INSTANT = datetime.timedelta(microseconds=1)


@dataclass(frozen=True)
class QuotaLevel:
    """One quota on a department's chain, as admission counts it now."""

    department_id: int
    department: str
    what: str  # "a100 units" or "GPU-equivalents"
    holds: Decimal  # what admission counts the level's department as holding now
    limit: Decimal  # the limit in force now (quota windows applied)
    guaranteed: Decimal
    tightest: bool = False  # of the chain's levels that count the same thing, the one with the least room

    @property
    def left(self) -> Decimal:
        return max(self.limit - self.holds, ZERO)

    @property
    def over(self) -> Decimal:
        """What it holds beyond the limit (a limit lowered under what holds, a factor's oversubscription)."""
        return max(self.holds - self.limit, ZERO)


@dataclass(frozen=True)
class QuotaChain:
    """Every quota a request of ``department``'s projects must fit, grouped by what each counts
    (flavors' units first, then GPU-equivalents), nearest department first within a group."""

    department_id: int
    department: str
    groups: list[list[QuotaLevel]]


def _own_holdings(*, at: datetime.datetime, department_ids: frozenset[int]) -> dict[tuple[int, algebra.Scope], Decimal]:
    """What each department's own projects hold at ``at``, per scope (one query)."""
    totals: dict[tuple[int, algebra.Scope], Decimal] = defaultdict(Decimal)
    rows = (
        holding_at(at).filter(project__department_id__in=sorted(department_ids))
        .values("project__department_id", "flavor_id", "flavor__gpu_equivalents").annotate(units=Sum("quantity"))
        .order_by()
    )
    for row in rows:
        amounts = grant_amounts(flavor_id=row["flavor_id"], quantity=row["units"],
                                gpu_equivalents=row["flavor__gpu_equivalents"])
        for scope, amount in amounts.items():
            totals[(row["project__department_id"], scope)] += amount
    return dict(totals)


def _chain_groups(tree: algebra.Tree, totals: dict[tuple[int, algebra.Scope], Decimal], department_id: int,
                  names: dict[int, str], flavors: dict[int, str]) -> list[list[QuotaLevel]]:
    chain = tree.chain(department_id)
    scopes = sorted({scope for (owner, scope) in tree.limits if owner in chain and not isinstance(scope, tuple)},
                    key=algebra.scope_key)
    ask = algebra.Ask(department_id=department_id, amounts=dict.fromkeys(scopes, ZERO), priority=0)
    by_scope: dict[algebra.Scope, list[algebra.Check]] = defaultdict(list)
    for check in algebra.checks_from_totals(tree, totals, ask):
        by_scope[check.scope].append(check)
    groups = []
    for scope in scopes:
        checks = by_scope[scope]
        least = min(checks, key=lambda check: check.effective_limit - check.holds)
        groups.append([
            QuotaLevel(
                department_id=check.department_id, department=names[check.department_id],
                what=scope_words(scope, flavor=flavors.get(scope, "") if isinstance(scope, int) else "",
                                 priority_class=""),
                holds=check.holds, limit=check.effective_limit,
                guaranteed=tree.limits[(check.department_id, scope)].guaranteed,
                tightest=len(checks) > 1 and check is least,
            )
            for check in checks
        ])
    return groups


def quota_chains(
    *, department_ids: list[int], at: datetime.datetime | None = None, parents: dict[int, int | None] | None = None
) -> list[QuotaChain]:
    """For each department, every quota its projects' requests must fit now, with the room each
    leaves by admission's rule, and the tightest of each group marked. ``parents``: the department
    tree already read (a request's access check's), else read here."""
    if not department_ids:
        return []
    at = at or clock_now()
    parents = parents if parents is not None else department_parent_map()
    tree = QuotaView.read(parents=parents).tree(at, at + INSTANT)
    chains = {department_id: tree.chain(department_id) for department_id in department_ids}
    roots = sorted({chain[-1] for chain in chains.values()})
    totals = _own_holdings(at=at, department_ids=department_subtree_ids(root_ids=roots, parents=parents))
    on_chains = {department for chain in chains.values() for department in chain}
    names = dict(Department.objects.filter(pk__in=sorted(on_chains)).values_list("pk", "slug"))
    flavor_ids = {scope for (owner, scope) in tree.limits if owner in on_chains and isinstance(scope, int)}
    flavors = dict(Flavor.objects.filter(pk__in=sorted(flavor_ids)).values_list("pk", "name"))
    return [
        QuotaChain(department_id=department_id, department=names[department_id],
                   groups=_chain_groups(tree, totals, department_id, names, flavors))
        for department_id in department_ids
    ]

"""Which grants a quota window's lower limit takes back (shrink policy ``reclaim``), as a pure
function: the portal's tick (``allocations.windows.shrinks.shrink_victims``) and the policy twin
(``twin.replay``) both ask it.

The grants are those holding at the edge in the department and below (not already being
reclaimed; a grant giving back some units counts the units it keeps, and may not be taken). They
are chosen as admission chooses victims, for a request of nothing in the scope the window changes
(``victims.plan``): with only the department's own limit above it (the departments above are not
this window's business), and whatever the windows' shrink policies, what holds beyond the new limit
counts (no ``Limit.kept``): the grants beyond it in priority order (highest first, then oldest)
first, then the lowest priority and newest, the fewest that bring the department within it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from decimal import Decimal

from allocations.quotas import algebra, victims


def shrink_scope(tree: algebra.Tree, *, department_id: int, scope: algebra.Scope) -> algebra.Scope:
    """The scope whose limit the shrink brings the department within: ``scope``, or for a class's
    share no narrower than the department's quota, the quota's (where the department has no limit
    in it either, nothing is taken)."""
    if (department_id, scope) not in tree.limits and isinstance(scope, tuple):
        department_wide: algebra.Scope = scope[2]
        return department_wide
    return scope


def shrink_plan(
    tree: algebra.Tree, grants: Sequence[algebra.Grant], *, department_id: int, scope: algebra.Scope,
    above: Collection[int],
) -> algebra.Plan | None:
    """The plan that brings ``department_id`` within its limit in ``scope`` in ``tree`` (the numbers
    in force at the edge), taking from ``grants``; ``above``: the departments above it. None when
    the department has no limit in that scope (a class's share no narrower than the department's
    quota is read as the quota). ``Plan.admitted`` False: grants that may not be taken stand in the
    way (nothing is listed then)."""
    found = shrink_scope(tree, department_id=department_id, scope=scope)
    if (department_id, found) not in tree.limits:
        return None
    limits = {key: dataclasses.replace(limit, kept=None) for key, limit in tree.limits.items() if key[0] not in above}
    own = algebra.Tree(parents=tree.parents, limits=limits, class_shares=tree.class_shares)
    nothing = algebra.Ask(department_id=department_id, amounts={found: Decimal(0)}, priority=0)
    return victims.plan(own, list(grants), nothing)


__all__ = ["shrink_plan", "shrink_scope"]

"""Which idle policy applies to a grant, pure: the most specific active one.

A policy applies when its department (if any) is the grant's department or one of its ancestors,
its cluster (if any) is the grant's, and its priority class (if any) is the grant's. Among those,
the nearest department wins (a policy of the grant's own department before its parent's, any
department before none), then one naming a priority class, then one naming a cluster, then the
newest (highest id).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PolicyScope:
    policy_id: int
    department_id: int | None
    cluster_id: int | None
    priority_class_id: int | None


def policy_for(
    scopes: Iterable[PolicyScope], *, chain: Sequence[int], cluster_id: int | None, priority_class_id: int | None
) -> int | None:
    """The id of the policy that applies; ``chain`` is the grant's department and its ancestors,
    nearest first. None when no policy applies."""
    best: tuple[int, int, int, int] | None = None
    chosen: int | None = None
    for scope in scopes:
        if scope.department_id is None:
            distance = len(chain)
        elif scope.department_id in chain:
            distance = chain.index(scope.department_id)
        else:
            continue
        if scope.cluster_id is not None and scope.cluster_id != cluster_id:
            continue
        if scope.priority_class_id is not None and scope.priority_class_id != priority_class_id:
            continue
        key = (-distance, int(scope.priority_class_id is not None), int(scope.cluster_id is not None), scope.policy_id)
        if best is None or key > best:
            best, chosen = key, scope.policy_id
    return chosen

"""Which placement policy books a flavor's units: the flavor's ``placement_policy``.

``binpack`` (the default) is the engine's default policy, which packs units onto busy GPUs and
nodes while keeping room for the typical units of the catalogue (:mod:`placement.policies.ours`);
``spread`` puts each unit on the node, then the GPU, with the most free capacity
(:mod:`placement.policies.spread`). Approval, the adoption of units granted before
placement existed and the placement preview all choose through :func:`placement_policy_for`, so
the preview shows what approval would book.
"""

from __future__ import annotations

from allocations.models import Flavor, PlacementPolicy
from placement import Policy, Workload, default_policy
from placement.policies import Spread


def placement_policy_for(flavor: Flavor, workload: Workload | None = None) -> Policy:
    """A fresh policy instance for units of ``flavor`` (``workload`` feeds the binpack policy)."""
    if flavor.placement_policy == PlacementPolicy.SPREAD:
        return Spread()
    return default_policy(workload)

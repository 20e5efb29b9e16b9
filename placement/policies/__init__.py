"""Placement policies by name. ``default_policy()`` is our own (see :mod:`.ours`)."""

from __future__ import annotations

from ..workload import Workload
from .base import Policy, ScoredPolicy
from .fgd import FGD
from .ours import Ours
from .reference import BestFit, Clustering, DotProduct, FirstFit, Packing, RandomPolicy
from .spread import Spread

REFERENCE_POLICIES = ("random", "dotproduct", "clustering", "packing", "bestfit", "fgd", "firstfit")
POLICY_NAMES = (*REFERENCE_POLICIES, Ours.name)
"""The benchmarked policies. ``spread`` (:mod:`.spread`) is a flavor's choice, not a benchmark entry."""


def make_policy(name: str, workload: Workload | None = None, seed: int = 0) -> Policy:
    """A fresh policy instance. ``workload`` feeds FGD and ours (estimated online if None);
    ``seed`` feeds Random."""
    simple: dict[str, type[Policy]] = {
        "firstfit": FirstFit, "dotproduct": DotProduct, "clustering": Clustering, "packing": Packing,
        "bestfit": BestFit, Spread.name: Spread,
    }
    if name in simple:
        return simple[name]()
    if name == "random":
        return RandomPolicy(seed)
    if name == "fgd":
        return FGD(workload)
    if name == Ours.name:
        return Ours(workload)
    raise KeyError(f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")


def default_policy(workload: Workload | None = None) -> Policy:
    return Ours(workload)


__all__ = [
    "BestFit", "Clustering", "DotProduct", "FGD", "FirstFit", "Ours", "Packing", "Policy", "POLICY_NAMES",
    "RandomPolicy", "REFERENCE_POLICIES", "ScoredPolicy", "Spread", "default_policy", "make_policy",
]

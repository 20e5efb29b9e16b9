"""Fragmentation Gradient Descent (FGD), from ``../shared/reference/placement-benchmark.md`` §4.

For every feasible node (and, for a sharing pod, every fitting GPU) compute the change of the
node fragmentation F_n the placement would cause; the smallest increase wins. The node score is
``int(100 * sigmoid(-dF / 1000))``, so nodes within ~40 milli tie and fall back to the node rank.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..arrays import BoolArray, FloatArray
from ..cluster import Cluster
from ..decisions import Request, RequestKind
from ..workload import Workload
from .base import Choice, Policy, best_by_score
from .delta_cache import DeltaCache, Deltas
from .workload_estimate import WorkloadEstimate


def fgd_score(df: FloatArray) -> FloatArray:
    """``int(100 * sigmoid(-dF / 1000))`` (the +-1e6 clip keeps exp finite; +inf scores 0)."""
    with np.errstate(over="ignore"):
        out: FloatArray = np.floor(100.0 / (1.0 + np.exp(np.clip(df, -1e6, 1e6) / 1000.0)))
    return out


class FragmentationPolicy(Policy):
    """Shared machinery: a workload (given, or estimated online) and a delta cache per cluster."""

    def __init__(self, workload: Workload | None = None, coverage: float = 0.95) -> None:
        super().__init__()
        self.workload = workload
        self.coverage = coverage
        self.estimate = WorkloadEstimate() if workload is None else None

    def current_workload(self) -> Workload:
        if self.workload is not None:
            return self.workload
        assert self.estimate is not None
        return self.estimate.workload()

    def _cache(self, cluster: Cluster, workload: Workload) -> DeltaCache:
        return DeltaCache(cluster, workload.top(self.coverage))

    def deltas(self, cluster: Cluster, request: Request) -> Deltas:
        """Fragmentation deltas for ``request`` on every node (cached on the cluster)."""
        key = ("deltas", id(self))
        cache: DeltaCache | None = cluster.cache.get(key)
        changed = self.estimate.observe(request) if self.estimate is not None else False
        if cache is None or changed:
            cache = self._cache(cluster, self.current_workload())
            cluster.cache[key] = cache
        return cache.get(request)

    def gpus_from(self, cluster: Cluster, request: Request, node: int, d: Deltas) -> tuple[
            tuple[int, ...], tuple[int, ...]]:
        kind = request.kind
        if kind is RequestKind.SHARED:
            return (int(d.slot[node]),), ()
        if kind is RequestKind.MIG and request.gpu_count == 1:
            return (int(d.slot[node]),), (int(d.start[node]),)
        return self.pick_gpus(cluster, request, node)


class FGD(FragmentationPolicy):
    name: ClassVar[str] = "fgd"

    def choose(self, cluster: Cluster, request: Request, feasible: BoolArray) -> Choice:
        d = self.deltas(cluster, request)
        cand = np.flatnonzero(feasible)
        node = best_by_score(cluster, cand, fgd_score(d.df[cand]))
        slots, starts = self.gpus_from(cluster, request, node, d)
        return node, slots, starts

    def pick_node(self, cluster: Cluster, request: Request, feasible: BoolArray) -> int:
        return self.choose(cluster, request, feasible)[0]

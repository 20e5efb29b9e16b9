"""What every placement policy shares: the decision interface and the common in-node GPU rules.

Rules from ``../shared/reference/placement-benchmark.md`` §2 item 6 and §4: node ties break by the
lowest node rank; whole-GPU pods take the lowest-index fully-free GPUs; unless a policy says
otherwise, a sharing pod takes the best-fit GPU (the fitting GPU with the least free milli).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from ..arrays import BoolArray, FloatArray, IntArray
from ..cluster import Cluster
from ..decisions import Request, RequestKind
from ..mig_planner import SlicePlanner

Choice = tuple[int, tuple[int, ...], tuple[int, ...]]
"""(node index, GPU slots on that node, MIG start per slot)."""


def lowest_rank(cluster: Cluster, candidates: IntArray) -> int:
    return int(candidates[np.argmin(cluster.rank[candidates])])


def best_by_score(cluster: Cluster, candidates: IntArray, scores: FloatArray) -> int:
    """The highest score; equal scores fall back to the lowest node rank."""
    top = candidates[scores == scores.max()]
    return int(top[0]) if len(top) == 1 else lowest_rank(cluster, top)


def best_fit_gpus(cluster: Cluster, request: Request, node: int, planner: SlicePlanner | None = None) -> tuple[
        tuple[int, ...], tuple[int, ...]]:
    kind = request.kind
    if kind is RequestKind.CPU_ONLY:
        return (), ()
    if kind is RequestKind.MIG:
        return (planner or SlicePlanner()).choose(cluster, request, node)
    ok = cluster.gpu_candidates(request, np.array([node]))[0]
    if kind is RequestKind.SHARED:
        free = np.where(ok, cluster.gpu_free[node], np.iinfo(np.int64).max)
        return (int(free.argmin()),), ()
    return tuple(int(j) for j in np.flatnonzero(ok)[: request.gpu_count]), ()


class Policy(ABC):
    """A placement policy: picks a node among the feasible ones, then GPUs on it."""

    name: ClassVar[str] = ""

    def __init__(self) -> None:
        self.planner = SlicePlanner()

    def choose(self, cluster: Cluster, request: Request, feasible: BoolArray) -> Choice:
        node = self.pick_node(cluster, request, feasible)
        slots, starts = self.pick_gpus(cluster, request, node)
        return node, slots, starts

    @abstractmethod
    def pick_node(self, cluster: Cluster, request: Request, feasible: BoolArray) -> int: ...

    def pick_gpus(self, cluster: Cluster, request: Request, node: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return best_fit_gpus(cluster, request, node, self.planner)


class ScoredPolicy(Policy):
    """A policy that scores every feasible node; the highest score wins.

    ``quantise`` mimics the kube-scheduler framework, whose node scores are integers 0..100, so
    near-equal nodes tie and fall back to the node rank (§2 item 6).
    """

    quantise: ClassVar[bool] = True

    def pick_node(self, cluster: Cluster, request: Request, feasible: BoolArray) -> int:
        cand = np.flatnonzero(feasible)
        if len(cand) == 1:
            return int(cand[0])
        scores = self.scores(cluster, request, cand)
        if self.quantise:
            scores = np.floor(scores)
        return best_by_score(cluster, cand, scores)

    @abstractmethod
    def scores(self, cluster: Cluster, request: Request, candidates: IntArray) -> FloatArray:
        """Score (0..100, higher is better) of each candidate node."""

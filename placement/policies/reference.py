"""The reference policies of ``../shared/reference/placement-benchmark.md`` §4 (and FirstFit, §6),
implemented from the written rules. Scores use the 0..100 scale of the kube-scheduler."""

from __future__ import annotations

import random
from typing import ClassVar

import numpy as np

from ..arrays import BoolArray, FloatArray, IntArray
from ..cluster import SHARED_TAG, Cluster
from ..decisions import Request, RequestKind
from .amounts import gpu_free, node_free, per_gpu_demand, total_demand
from .base import Policy, ScoredPolicy, lowest_rank

CPU_SCALE = 128_000.0  # 128 cores, in milli-cores
GPU_SCALE = 8_000.0  # 8 GPUs, in milli


class FirstFit(Policy):
    """No score: the feasible node with the lowest rank, best-fit GPU (§6)."""

    name: ClassVar[str] = "firstfit"

    def pick_node(self, cluster: Cluster, request: Request, feasible: BoolArray) -> int:
        return lowest_rank(cluster, np.flatnonzero(feasible))


class RandomPolicy(Policy):
    """A uniformly random feasible node; a random fitting GPU for a sharing pod (§4)."""

    name: ClassVar[str] = "random"

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.rng = random.Random(seed)

    def pick_node(self, cluster: Cluster, request: Request, feasible: BoolArray) -> int:
        cand = np.flatnonzero(feasible)
        return int(cand[self.rng.randrange(len(cand))])

    def pick_gpus(self, cluster: Cluster, request: Request, node: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        if request.kind is RequestKind.SHARED:
            ok = np.flatnonzero(cluster.gpu_candidates(request, np.array([node]))[0])
            return (int(ok[self.rng.randrange(len(ok))]),), ()
        return super().pick_gpus(cluster, request, node)


class DotProduct(ScoredPolicy):
    """Tetris-style: the smallest dot product of (free CPU/128 cores, free GPU/8000 milli) with
    the pod's (CPU/128 cores, GPU/8000) wins; score = 1 - dot/2 (§4)."""

    name: ClassVar[str] = "dotproduct"

    def scores(self, cluster: Cluster, request: Request, candidates: IntArray) -> FloatArray:
        dot = (cluster.cpu_free[candidates] / CPU_SCALE) * (request.cpu_milli / CPU_SCALE) + (
            node_free(cluster, candidates) / GPU_SCALE) * (total_demand(request) / GPU_SCALE)
        out: FloatArray = 100.0 * (1.0 - dot / 2.0)
        return out


class BestFit(ScoredPolicy):
    """The tightest node: minimise 0.5 (free CPU after)/128 cores + 0.5 (free GPU after)/8000 (§4)."""

    name: ClassVar[str] = "bestfit"

    def scores(self, cluster: Cluster, request: Request, candidates: IntArray) -> FloatArray:
        left = 0.5 * (cluster.cpu_free[candidates] - request.cpu_milli) / CPU_SCALE + 0.5 * (
            node_free(cluster, candidates) - total_demand(request)) / GPU_SCALE
        out: FloatArray = 100.0 * (1.0 - left)
        return out


class Clustering(ScoredPolicy):
    """GPU clustering: keep GPU pods of one tag ("sharing" or "k whole GPUs") together (§4).

    Tiers: only this tag (75-100] > this tag among others (50-75] > no GPU pods (25-50] >
    other tags only (0-25]; inside a tier the more GPU capacity in use, the higher. "In use" is
    read on the same 8-GPU scale as BestFit and DotProduct: (8000 - free milli) / 8000, so a
    small node counts as fuller than a large one with the same free capacity.
    CPU-only pods score 0 everywhere.
    """

    name: ClassVar[str] = "clustering"

    def scores(self, cluster: Cluster, request: Request, candidates: IntArray) -> FloatArray:
        if request.kind is RequestKind.CPU_ONLY:
            return np.zeros(len(candidates))
        tag = SHARED_TAG if request.kind in (RequestKind.SHARED, RequestKind.MIG) else min(
            request.gpu_count, cluster.max_gpus)
        tags = cluster.tags[candidates]
        mine = tags[:, tag]
        total = tags.sum(axis=1)
        used = np.clip((GPU_SCALE - node_free(cluster, candidates)) / GPU_SCALE, 0.0, 1.0)
        base = np.select([(mine > 0) & (mine == total), mine > 0, total == 0], [75.0, 50.0, 25.0], 0.0)
        out: FloatArray = base + 25.0 * used
        return out


class Packing(ScoredPolicy):
    """GPU packing (§4): fits entirely on partially-used GPUs (50-100, less leftover better) >
    opens free GPUs on a used node (33-50, fewer opened better) > a node with all GPUs free
    (0-33, smaller node better). CPU-only pods score 0."""

    name: ClassVar[str] = "packing"

    def scores(self, cluster: Cluster, request: Request, candidates: IntArray) -> FloatArray:
        n = len(candidates)
        if request.kind is RequestKind.CPU_ONLY:
            return np.zeros(n)
        free = gpu_free(cluster, candidates)
        cap = np.where(cluster.gpu_present[candidates], 1000.0, 0.0)
        partial = (free > 0) & (free < cap)
        cand = cluster.gpu_candidates(request, candidates)
        need = per_gpu_demand(request)
        on_partial = cand & partial
        k = request.gpu_count
        fits_partial = on_partial.sum(axis=1) >= k
        leftover = np.where(on_partial, free - need, np.inf).min(axis=1)
        node_used = (free < cap).any(axis=1)
        gpus = cluster.gpu_present[candidates].sum(axis=1)
        opened = float(min(k, cluster.max_gpus))
        tier1 = 50.0 + 50.0 * (1.0 - np.where(np.isfinite(leftover), leftover, 1000.0) / 1000.0)
        tier2 = np.full(n, 33.0 + 17.0 * (1.0 - opened / cluster.max_gpus))
        tier3 = 33.0 * (1.0 - (gpus - 1) / cluster.max_gpus)
        out: FloatArray = np.where(fits_partial, tier1, np.where(node_used, tier2, tier3))
        return out

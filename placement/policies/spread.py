"""Spread: the opposite of packing, for services that want their units apart.

The node with the most free GPU capacity of the request's models wins (capacity in the one unit
of :mod:`.amounts`: milli for shared and whole GPUs, compute slices for MIG GPUs); equal nodes
fall back to the lowest node rank, so the choice is deterministic. On that node a sharing unit
takes the fitting GPU with the most free milli (equal GPUs: the lowest index), a whole-GPU unit
the lowest-index free GPUs (all free GPUs are equal), and a MIG instance goes where the slice
planner puts it (it keeps the GPU's remaining layouts open, which is what spreading wants too).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..arrays import BoolArray
from ..cluster import Cluster
from ..decisions import Request, RequestKind
from .amounts import gpu_free
from .base import Policy, best_by_score, best_fit_gpus


class Spread(Policy):
    name: ClassVar[str] = "spread"

    def pick_node(self, cluster: Cluster, request: Request, feasible: BoolArray) -> int:
        candidates = np.flatnonzero(feasible)
        if len(candidates) == 1:
            return int(candidates[0])
        allowed = cluster.model_masks(request.allowed_models)[0][candidates]
        free = np.where(allowed, gpu_free(cluster, candidates), 0.0).sum(axis=1)
        return best_by_score(cluster, candidates, free)

    def pick_gpus(self, cluster: Cluster, request: Request, node: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        if request.kind is not RequestKind.SHARED:
            return best_fit_gpus(cluster, request, node, self.planner)
        ok = cluster.gpu_candidates(request, np.array([node]))[0]
        free = np.where(ok, cluster.gpu_free[node], -1)
        return (int(free.argmax()),), ()

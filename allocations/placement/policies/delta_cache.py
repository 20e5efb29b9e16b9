"""Per-node fragmentation deltas, cached per request shape and refreshed only where nodes changed.

Scoring every node with the FGD rule for every decision costs nodes x GPUs x classes work; but a
decision changes one node, so a shape's cached deltas stay valid except on nodes whose
``Cluster.version`` moved since they were computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arrays import FloatArray, IntArray
from ..cluster import Cluster
from ..decisions import Request
from ..fragmentation import FragModel
from ..workload import Workload

ShapeKey = tuple[object, ...]


def shape_key(request: Request) -> ShapeKey:
    """What the fragmentation delta depends on (memory does not enter F_n)."""
    return (request.cpu_milli, request.gpu_count, request.gpu_milli, request.mig_profile, request.allowed_models)


@dataclass
class Deltas:
    version: IntArray
    df: FloatArray
    slot: IntArray
    start: IntArray


class DeltaCache:
    def __init__(self, cluster: Cluster, workload: Workload) -> None:
        self.cluster = cluster
        self.model = FragModel(cluster, workload)
        self.entries: dict[ShapeKey, Deltas] = {}

    def get(self, request: Request) -> Deltas:
        c = self.cluster
        key = shape_key(request)
        e = self.entries.get(key)
        n = len(c.names)
        if e is None:
            e = Deltas(np.full(n, -1, dtype=np.int64), np.full(n, np.inf), np.full(n, -1, dtype=np.int64),
                       np.full(n, -1, dtype=np.int64))
            self.entries[key] = e
        dirty = np.flatnonzero(e.version != c.version)
        if len(dirty):
            df, slot, start = self.model.delta(dirty, request)
            e.df[dirty] = df
            e.slot[dirty] = slot
            e.start[dirty] = start
            e.version[dirty] = c.version[dirty]
        return e

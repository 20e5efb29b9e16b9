"""Per-node fragmentation deltas, cached per request shape and refreshed only where nodes changed.

Scoring every node with the FGD rule for every decision costs nodes x GPUs x classes work; but a
decision changes one node, so a shape's cached deltas stay valid except on nodes whose
``Cluster.version`` moved since they were computed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..arrays import FloatArray, IntArray
from ..cluster import Cluster
from ..decisions import Request
from ..fragmentation import FragModel, NodeTerms
from ..workload import Workload

ShapeKey = tuple[object, ...]


DEDUPE_ABOVE = 48
"""Dirty sets larger than this are reduced to distinct node states first."""


def shape_key(request: Request, with_models: bool = True) -> ShapeKey:
    """What the fragmentation delta depends on (memory does not enter F_n; the allowed models
    only mask GPUs, which on single-model nodes the node feasibility check already does)."""
    models = request.allowed_models if with_models else None
    return (request.cpu_milli, request.gpu_count, request.gpu_milli, request.mig_profile, models)


def _row_hash(rows: IntArray) -> IntArray:
    """A 64-bit fingerprint per row (random odd weights, wrapping arithmetic): equal rows get
    equal fingerprints; two different rows collide with probability about 2**-63."""
    weights = np.random.default_rng(20230605).integers(1, 2**62, size=rows.shape[1], dtype=np.int64) | 1
    with np.errstate(over="ignore"):
        out: IntArray = (rows * weights).sum(axis=1)
    return out


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
        self.terms = NodeTerms(self.model)
        self.uniform = cluster.uniform_models()
        self.entries: dict[ShapeKey, Deltas] = {}

    def get(self, request: Request) -> Deltas:
        c = self.cluster
        key = shape_key(request, not self.uniform)
        if self.uniform and request.allowed_models:
            request = replace(request, allowed_models=frozenset())
        e = self.entries.get(key)
        n = len(c.names)
        if e is None:
            e = Deltas(np.full(n, -1, dtype=np.int64), np.full(n, np.inf), np.full(n, -1, dtype=np.int64),
                       np.full(n, -1, dtype=np.int64))
            self.entries[key] = e
        dirty = np.flatnonzero(e.version != c.version)
        if len(dirty):
            self.terms.refresh()
            rows = dirty
            if len(dirty) > DEDUPE_ABOVE:
                state = np.hstack([c.cpu_free[dirty, None], c.gpu_model[dirty], c.gpu_free[dirty], c.mig_state[dirty]])
                _, first, inverse = np.unique(_row_hash(state), return_index=True, return_inverse=True)
                rows = dirty[first]
            df, slot, start = self.model.delta(rows, request, self.terms.of(rows))
            if rows is not dirty:
                inv = inverse.reshape(-1)
                df, slot, start = df[inv], slot[inv], start[inv]
            e.df[dirty] = df
            e.slot[dirty] = slot
            e.start[dirty] = start
            e.version[dirty] = c.version[dirty]
        return e

"""Choosing the GPU and start slot for a MIG instance inside a node.

The trap this avoids (``../shared/reference/placement-benchmark.md`` §7 B2): a ``3g`` at start 0
blocks the only ``4g`` start. Each candidate (GPU, start) is judged by the layout it leaves:
the free compute slices weighted by how many profiles could no longer be created there
(a per-GPU form of the FGD fragmentation), then by how many (profile, start) pairs stay legal.
Profiles weigh equally unless a workload says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

import numpy as np

from . import mig_tables
from .arrays import FloatArray, IntArray
from .cluster import Cluster
from .decisions import Request
from .mig import GEOMETRIES


@lru_cache(maxsize=32)
def layout_tables(weights: tuple[tuple[str, float], ...]) -> tuple[FloatArray, IntArray]:
    """(fragmentation[state], options[state]) for profile ``weights`` (name, weight)."""
    free = mig_tables.free_compute_table().astype(np.float64)
    blocked = np.zeros(mig_tables.TABLE_SIZE, dtype=np.float64)
    options = np.zeros(mig_tables.TABLE_SIZE, dtype=np.int64)
    for name, w in weights:
        legal = mig_tables.legal_table(name)
        blocked += w * ~legal
        after, _ = mig_tables.transitions(name)
        options += (after >= 0).sum(axis=1)
    frag: FloatArray = free * blocked
    return frag, options


def default_weights() -> tuple[tuple[str, float], ...]:
    names = sorted({p.name for g in GEOMETRIES.values() for p in g.profiles if not p.media_extensions})
    return tuple((n, 1.0) for n in names)


class SlicePlanner:
    """Picks (GPU slots, start slots) for a MIG request on a chosen node."""

    def __init__(self, weights: Mapping[str, float] | None = None) -> None:
        items = tuple(sorted(weights.items())) if weights else default_weights()
        self.frag, self.options = layout_tables(items)

    def choose(self, cluster: Cluster, request: Request, node: int, best_fit: bool = True) -> tuple[
            tuple[int, ...], tuple[int, ...]]:
        """Best-fit GPU (fewest free compute slices that still fit), then the start whose
        remaining layout is least fragmented; for k GPUs, repeat on the remaining GPUs."""
        assert request.mig_profile is not None
        after, start = mig_tables.transitions(request.mig_profile)
        rows = np.array([node])
        cand = cluster.gpu_candidates(request, rows)[0]
        states = cluster.mig_state[node]
        free = mig_tables.free_compute_table()[states]
        slots: list[int] = []
        starts: list[int] = []
        for _ in range(request.gpu_count):
            best: tuple[float, ...] | None = None
            pick = (-1, -1)
            for j in (int(x) for x in np.flatnonzero(cand)):
                if j in slots:
                    continue
                for k in range(after.shape[1]):
                    nxt = int(after[states[j], k])
                    if nxt < 0:
                        continue
                    gain = float(self.frag[nxt] - self.frag[states[j]])
                    key = (float(free[j]) if best_fit else 0.0, gain, -float(self.options[nxt]),
                           float(j), float(start[states[j], k]))
                    if best is None or key < best:
                        best, pick = key, (j, int(start[states[j], k]))
            if best is None:
                raise ValueError("no legal MIG start on this node")
            slots.append(pick[0])
            starts.append(pick[1])
        return tuple(slots), tuple(starts)

"""Arrival order, inflation and node ranks (``../shared/reference/placement-benchmark.md`` §2, §7 B1).

One ``random.Random(seed)`` drives, in this order: the shuffle of the name-sorted pod list, the
re-sampling that fills the sequence up to 1.3 x capacity (or the thinning of longer lists), and
the node rank permutation used by every policy to break ties.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..decisions import Request

TUNE = 1.3


@dataclass(frozen=True)
class Protocol:
    sequence: list[Request]
    rank: list[int]


def prepare(pods: Sequence[Request], n_nodes: int, capacity: float, seed: int,
            demand: Callable[[Request], float], tune: float = TUNE) -> Protocol:
    rng = random.Random(seed)
    base = sorted(pods, key=lambda p: p.name)
    seq = list(base)
    rng.shuffle(seq)
    limit = tune * capacity
    total = sum(demand(p) for p in seq)
    if total > limit:
        while total > limit:
            total -= demand(seq.pop(rng.randrange(len(seq))))
    else:
        while True:
            p = base[rng.randrange(len(base))]
            if total + demand(p) > limit:
                break
            seq.append(p)
            total += demand(p)
    rank = list(range(n_nodes))
    rng.shuffle(rank)
    return Protocol(seq, rank)

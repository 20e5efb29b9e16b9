"""Sustainable load: the largest arrival-rate multiplier at which the requests that arrive within
their department's guarantee still start within ``target_s`` (p99), found by bisection.

A multiplier ``m`` divides every arrival time (``submit_at``, ``starts_at``) by ``m``: the same
requests arrive ``m`` times as fast, over a window ``m`` times shorter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from placement import Node
from twin.policy import Policy
from twin.replay.engine import replay
from twin.replay.metrics import measure
from twin.workload import Job

TARGET_S = 300.0


def compressed(jobs: Sequence[Job], multiplier: float) -> list[Job]:
    return [replace(job, submit_at=job.submit_at / multiplier,
                    starts_at=None if job.starts_at is None else job.starts_at / multiplier) for job in jobs]


@dataclass(frozen=True)
class LoadSearch:
    policy: str
    multiplier: float  # the largest one found that holds
    tried: tuple[tuple[float, float], ...]  # (multiplier, in-guarantee p99 wait) in the order tried


def holds(jobs: Sequence[Job], nodes: Sequence[Node], policy: Policy, mode: str, multiplier: float) -> float:
    """The in-guarantee p99 wait (seconds) at ``multiplier``."""
    return measure(replay(compressed(jobs, multiplier), nodes, policy, mode)).waits_in_guarantee.p99


def sustainable_load(jobs: Sequence[Job], nodes: Sequence[Node], policy: Policy, mode: str, *,
                     steps: int = 5, target_s: float = TARGET_S) -> LoadSearch:
    """Bracket by doubling or halving from 1 (up to 64 or down to 1/64), then ``steps`` bisections
    in the logarithm of the multiplier. A policy that holds at 64 is reported at 64 (at least)."""
    tried: list[tuple[float, float]] = []

    def ok(multiplier: float) -> bool:
        p99 = holds(jobs, nodes, policy, mode, multiplier)
        tried.append((multiplier, p99))
        return p99 <= target_s

    going_up = ok(1.0)
    low, high = (1.0, 2.0) if going_up else (0.5, 1.0)
    while going_up and ok(high):
        if high >= 64:
            return LoadSearch(mode, high, tuple(tried))
        low, high = high, high * 2
    while not going_up and not ok(low):
        if low <= 1 / 64:
            return LoadSearch(mode, 0.0, tuple(tried))  # not even at 1/64 of the arrival rate
        low, high = low / 2, low
    for _ in range(steps):
        middle = (low * high) ** 0.5
        if ok(middle):
            low = middle
        else:
            high = middle
    return LoadSearch(mode, low, tuple(tried))

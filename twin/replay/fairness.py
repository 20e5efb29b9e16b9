"""Finish-time fairness, as Themis defines it (Mahajan et al., "Themis: Fair and Efficient GPU
Cluster Scheduling", USENIX NSDI'20, §3): a job's finish-time fairness is ``ρ = T_shared ÷
T_independent``, the time it takes to finish in the shared cluster over the time it would take
with its fair share of the cluster to itself; ``ρ ≤ 1`` is a fair outcome, and the worst ``ρ``
(Themis' max-min objective) tells how badly the least treated job fared.

Here a job is one request, ``T`` is its completion time (from ``eligible_at`` to the end of its
last run, waits and reclaimed runs included), and the fair share is its department's guarantee:
``T_independent`` is the request's completion time in the ``alone`` replay, where each department
has its guarantee's share of the nodes to itself (``state.partition``, its units booked as they
ask), with only its own demand, so that it waits only behind its own requests, as Themis' 1/N
cluster waits only for the job's own work. The alone replay drains until every request that fits
its department's nodes has finished; a request that never finishes there (larger than its
department's nodes) has no ``T_independent`` and is left out (counted). A request that has not
finished when a shared replay stops counts up to that stop (a lower bound of its ``ρ``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from twin.replay.metrics import FinishFairness, Metrics, percentile

ALONE = "alone"  # the mode of the baseline replay (``modes.MODES``)
ALONE_DRAIN_S = 366 * 86400.0  # the alone replay runs until its queues are empty (within a year)


def finish_fairness(shared: Sequence[float | None], alone: Sequence[float | None]) -> FinishFairness:
    """``ρ`` of every request that has both times (the same workload, in the same order)."""
    if len(shared) != len(alone):
        raise ValueError("finish-time fairness compares two replays of the same workload")
    ratios = sorted(mine / fair for mine, fair in zip(shared, alone, strict=True)
                    if mine is not None and fair is not None and fair > 0)
    left_out = sum(1 for fair in alone if fair is None or fair <= 0)
    worst = ratios[-1] if ratios else 0.0
    return FinishFairness(worst, percentile(ratios, 95), percentile(ratios, 50), len(ratios), left_out)


def with_fairness(metrics: Metrics, alone: Metrics) -> Metrics:
    """``metrics`` with its finish-time fairness against the alone replay of the same workload."""
    return replace(metrics, finish_fairness=finish_fairness(metrics.completions, alone.completions))

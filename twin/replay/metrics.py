"""What a replay did, per policy and per department (docs/twin.md, "Metrics").

Over the measured window ``[0, horizon)`` (the last request's arrival):

* **allocation**: GPU-equivalents held (what the policy books: under static partitioning a share
  holds its whole GPU) × time ÷ (installed GPUs × horizon);
* **busy**: GPU-equivalents the requests themselves ask × their ``busy`` × time ÷ the same;
* **work**: GPU-hours of runtime served (the requests' own GPU-equivalents; runs cut by a reclaim
  do not count: their work is lost);
* **waits**: from arrival (``eligible_at``) to first start; a request that never started waits
  until the replay stops (horizon + drain), a lower bound; percentiles by nearest rank;
* **guarantee violations**: GPU-hours (GPU-equivalents × runtime) of requests that arrived within
  their department's guarantee and waited longer than the longest reclaim notice, against the
  guaranteed GPU-hours (the guarantees' sum × the horizon);
* **reclaims**: runs ended by a reclaim, and the GPU-hours they had run (lost);
* **Jain's index** over each department's time-averaged holding ÷ its guarantee;
* **finish-time fairness** (Themis): each request's completion time ÷ its completion time with
  its department's guarantee share to itself, worst and 95th percentile (``twin.replay.fairness``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from twin.replay.engine import Outcome

HOUR = 3600.0


@dataclass(frozen=True)
class Waits:
    count: int
    p50: float
    p95: float
    p99: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Waits:
        ordered = sorted(values)
        return cls(len(ordered), percentile(ordered, 50), percentile(ordered, 95), percentile(ordered, 99))


def percentile(ordered: Sequence[float], p: float) -> float:
    """Nearest rank: the smallest value with at least ``p`` % of the values at or below it (0 if none)."""
    if not ordered:
        return 0.0
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def jain(values: Sequence[float]) -> float:
    """(Σx)² ÷ (n Σx²): 1 when all are equal, 1/n when one has everything (1 for no values)."""
    squares = sum(x * x for x in values)
    return (sum(values) ** 2) / (len(values) * squares) if squares else 1.0


@dataclass(frozen=True)
class FinishFairness:
    """Finish-time fairness over a replay's requests (``twin.replay.fairness``)."""

    worst: float
    p95: float
    median: float
    count: int  # requests with a ratio
    left_out: int  # requests that never finished alone (no fair finish time)


@dataclass
class Share:
    """One department's (or the whole cluster's) figures."""

    name: str
    allocation: float = 0.0
    busy: float = 0.0
    work_gpu_h: float = 0.0
    waits: Waits = field(default_factory=lambda: Waits(0, 0.0, 0.0, 0.0))
    violations_gpu_h: float = 0.0
    reclaims: int = 0
    lost_gpu_h: float = 0.0
    held_mean: float = 0.0  # GPU-equivalents held on average over the window


@dataclass
class Metrics:
    policy: str
    total: Share
    departments: list[Share]
    waits_by_class: dict[str, Waits]
    waits_in_guarantee: Waits
    guaranteed_gpu_h: float
    jain: float
    wall_s: float
    events: int
    idle_warnings: int = 0
    idle_reclaims: int = 0
    window_edges: int = 0
    shrink_reclaims: int = 0  # grants a window's lower limit took back (shrink policy ``reclaim``)
    completions: tuple[float | None, ...] = ()  # each request's completion time (``fairness.completions``)
    finish_fairness: FinishFairness | None = None  # set against the alone replay (``with_fairness``)

    @property
    def violation_ratio(self) -> float:
        return self.total.violations_gpu_h / self.guaranteed_gpu_h if self.guaranteed_gpu_h else 0.0


def _runs(outcome: Outcome, shares: list[Share]) -> None:
    horizon = outcome.horizon
    for run in outcome.runs:
        overlap = max(0.0, min(run.end, horizon) - max(run.start, 0.0))
        share = shares[run.department - 1]
        share.allocation += run.held * overlap
        share.busy += run.native * run.busy * overlap
        if run.lost:
            share.reclaims += 1
            share.lost_gpu_h += run.native * (run.end - run.start) / HOUR
        else:
            share.work_gpu_h += run.native * overlap / HOUR


def _waits(outcome: Outcome, shares: list[Share]) -> tuple[dict[str, list[float]], list[float]]:
    by_department: dict[int, list[float]] = defaultdict(list)
    by_class: dict[str, list[float]] = defaultdict(list)
    in_guarantee: list[float] = []
    for record in outcome.records:
        job = record.job
        started = record.first_start if record.first_start is not None else outcome.stop
        wait = max(0.0, started - job.eligible_at)
        by_department[record.department].append(wait)
        by_class[job.priority_class].append(wait)
        if record.in_guarantee:
            in_guarantee.append(wait)
            if wait > outcome.notice_s:
                shares[record.department - 1].violations_gpu_h += job.milli / 1000 * job.runtime_s / HOUR
    for index, share in enumerate(shares, start=1):
        share.waits = Waits.of(by_department.get(index, ()))
    return by_class, in_guarantee


def completions(outcome: Outcome) -> tuple[float | None, ...]:
    """Each request's completion time, from ``eligible_at`` to the end of its last run (its
    records' order); one unfinished when the replay stopped: until the stop (a lower bound), or None
    for the alone replay (``twin.replay.fairness``: it never finished on its share)."""
    out: list[float | None] = []
    for record in outcome.records:
        eligible = record.job.eligible_at
        if record.finish is not None:
            out.append(max(record.finish - eligible, 0.0))
        else:
            out.append(None if outcome.policy == "alone" else max(outcome.stop - eligible, 0.0))
    return tuple(out)


def measure(outcome: Outcome) -> Metrics:
    shares = [Share(name) for name in outcome.departments]
    _runs(outcome, shares)
    by_class, in_guarantee = _waits(outcome, shares)
    capacity = outcome.installed * outcome.horizon or 1.0
    total = Share("all", waits=Waits.of(w for values in by_class.values() for w in values))
    for share in shares:
        total.allocation += share.allocation
        total.busy += share.busy
        total.work_gpu_h += share.work_gpu_h
        total.violations_gpu_h += share.violations_gpu_h
        total.reclaims += share.reclaims
        total.lost_gpu_h += share.lost_gpu_h
        share.held_mean = share.allocation / (outcome.horizon or 1.0)
        share.allocation /= capacity
        share.busy /= capacity
    total.held_mean = total.allocation / (outcome.horizon or 1.0)
    total.allocation /= capacity
    total.busy /= capacity
    ratios = [share.held_mean / g for share, g in zip(shares, outcome.guarantees, strict=True) if g > 0]
    return Metrics(
        policy=outcome.policy, total=total, departments=shares,
        waits_by_class={name: Waits.of(values) for name, values in sorted(by_class.items())},
        waits_in_guarantee=Waits.of(in_guarantee), guaranteed_gpu_h=sum(outcome.guarantees) * outcome.horizon / HOUR,
        jain=jain(ratios), wall_s=outcome.wall_s, events=outcome.events, completions=completions(outcome),
        idle_warnings=outcome.idle_warnings, idle_reclaims=outcome.idle_reclaims, window_edges=outcome.window_edges,
        shrink_reclaims=outcome.shrink_reclaims,
    )


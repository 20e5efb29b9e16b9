"""One online replay and its metrics (``../shared/reference/placement-benchmark.md`` §3, §7 B1).

Arrived workload x = arrived GPU demand / capacity; allocation A(x) = booked GPU demand /
capacity (both in %). Pods that fit nowhere are counted and dropped; the replay goes on.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..cluster import Cluster
from ..decisions import Placement, Request, RequestKind
from ..fragmentation import FragModel
from ..placing import place
from ..policies.amounts import total_demand
from ..policies.base import Policy

FRAG_POINTS = (50, 80, 90)


def request_kind_label(r: Request) -> str:
    k = r.kind
    if k is RequestKind.CPU_ONLY:
        return "cpu-only"
    if k is RequestKind.SHARED:
        return "shared"
    if k is RequestKind.MIG:
        return f"mig-{r.mig_profile}" if r.gpu_count == 1 else f"mig-{r.gpu_count}x{r.mig_profile}"
    return f"whole-{r.gpu_count}"


@dataclass
class RunResult:
    policy: str
    seed: int
    pods: int
    a100: float
    a130: float
    first_rejection: tuple[float, float] | None
    first_gap_x: float | None
    frag: dict[int, tuple[float, float]]
    rejected: dict[str, int]
    decisions: int
    decision_seconds: float
    p99_ms: float
    wall_seconds: float
    cpu_seconds: float
    curve: list[float] = field(default_factory=list)

    @property
    def decisions_per_second(self) -> float:
        return self.decisions / self.decision_seconds if self.decision_seconds else 0.0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["decisions_per_second"] = self.decisions_per_second
        out["frag"] = {str(k): {"rate_pct": v[0], "amount_pct": v[1]} for k, v in self.frag.items()}
        return out


def replay(cluster: Cluster, policy: Policy, sequence: Sequence[Request], frag: FragModel,
           seed: int = 0) -> RunResult:
    """Place ``sequence`` one pod at a time on ``cluster`` (mutated)."""
    start_wall = time.perf_counter()
    start_cpu = time.process_time()
    capacity = float(cluster.gpu_present.sum() * 1000)
    arrived = allocated = 0.0
    a100: float | None = None
    first_rej: tuple[float, float] | None = None
    first_gap: float | None = None
    frag_at: dict[int, tuple[float, float]] = {}
    rejected: Counter[str] = Counter()
    latencies = np.empty(len(sequence))
    curve: list[float] = []
    next_point = 0
    for i, req in enumerate(sequence):
        t0 = time.perf_counter()
        decision = place(cluster, req, policy)
        latencies[i] = time.perf_counter() - t0
        demand = total_demand(req)
        arrived += demand
        if isinstance(decision, Placement):
            cluster.apply(decision)
            allocated += demand
        else:
            rejected[request_kind_label(req)] += 1
            if first_rej is None:
                first_rej = (100 * (arrived - demand) / capacity, 100 * allocated / capacity)
        x = 100 * arrived / capacity
        a = 100 * allocated / capacity
        if first_gap is None and a < x - 1:
            first_gap = x
        while next_point <= x and next_point <= 130:
            curve.append(a)
            next_point += 1
        if a100 is None and x >= 100:
            a100 = a
        for p in FRAG_POINTS:
            if p not in frag_at and x >= p:
                amount = frag.total()
                idle = capacity - allocated
                frag_at[p] = (100 * amount / idle if idle else 100.0, 100 * amount / capacity)
    a_end = 100 * allocated / capacity
    return RunResult(
        policy=policy.name,
        seed=seed,
        pods=len(sequence),
        a100=a_end if a100 is None else a100,
        a130=a_end,
        first_rejection=first_rej,
        first_gap_x=first_gap,
        frag=frag_at,
        rejected=dict(sorted(rejected.items())),
        decisions=len(sequence),
        decision_seconds=float(latencies.sum()),
        p99_ms=float(np.percentile(latencies, 99) * 1000) if len(sequence) else 0.0,
        wall_seconds=time.perf_counter() - start_wall,
        cpu_seconds=time.process_time() - start_cpu,
        curve=curve,
    )

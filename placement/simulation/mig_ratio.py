"""Online MIG placement against the CP-SAT optimum on small instances cut from the trace.

Each instance: a few nodes drawn from the trace's node list (every GPU in MIG mode, §7 B2) and a
random stream of the trace's GPU pods mapped to MIG profiles, drawn until the slice demand
would pass 130 % of the instance's capacity. CPU-only pods are left out: they place no slices,
and leaving them out can only raise the optimum. The online policies see the stream in order;
CP-SAT sees it all at once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from ..cluster import Cluster
from ..decisions import Placement, Request, RequestKind
from ..inventory import Node
from ..mig import mig_compute
from ..mig_optimum import mig_optimum
from ..placing import place
from ..policies import Policy, make_policy
from ..workload import Workload
from .mig_variant import MIG_GEOMETRY, to_mig
from .trace import load_nodes, load_pods


@dataclass(frozen=True)
class RatioRow:
    instance: int
    gpus: int
    requests: int
    optimum: int
    proven: bool
    online: dict[str, int]


def _slices(r: Request) -> int:
    return mig_compute(str(r.mig_profile)) * r.gpu_count


@dataclass(frozen=True)
class InstanceDraw:
    """How the instances are drawn (how many, from which seed, how many trace nodes each) and how
    long CP-SAT may search each one."""

    instances: int
    seed: int
    nodes_per_instance: int = 2
    time_limit_s: float = 10.0


def cpsat_ratios(nodes_csv: Path, pods_csv: Path, draw: InstanceDraw, policies: tuple[str, ...]) -> list[RatioRow]:
    all_nodes = [n for n in load_nodes(nodes_csv, MIG_GEOMETRY) if n.gpus]
    pods = [to_mig(p) for p in load_pods(pods_csv)]
    gpu_pods = [p for p in pods if p.kind is RequestKind.MIG]
    workload = Workload.from_requests(pods, coverage=1.0)
    rng = random.Random(draw.seed)
    rows = []
    for i in range(draw.instances):
        nodes: list[Node] = rng.sample(all_nodes, draw.nodes_per_instance)
        seq = _stream(rng, gpu_pods, capacity=7 * sum(len(n.gpus) for n in nodes))
        online = {name: _online_slices(nodes, seq, make_policy(name, workload=workload, seed=draw.seed))
                  for name in policies}
        opt = mig_optimum(nodes, seq, time_limit_s=draw.time_limit_s)
        rows.append(RatioRow(i, sum(len(n.gpus) for n in nodes), len(seq), opt.slices, opt.proven, online))
    return rows


def _stream(rng: random.Random, gpu_pods: list[Request], capacity: int) -> list[Request]:
    """Pods drawn at random until the next would take the slice demand past 130 % of ``capacity``."""
    seq: list[Request] = []
    demand = 0
    while True:
        p = rng.choice(gpu_pods)
        if demand + _slices(p) > 1.3 * capacity:
            return seq
        seq.append(p)
        demand += _slices(p)


def _online_slices(nodes: list[Node], seq: list[Request], policy: Policy) -> int:
    """The compute slices ``policy`` places, seeing ``seq`` in order on a fresh cluster of ``nodes``."""
    c = Cluster(nodes)
    used = 0
    for r in seq:
        d = place(c, r, policy)
        if isinstance(d, Placement):
            c.apply(d)
            used += _slices(r)
    return used

"""One benchmark run from trace files: load, prepare the protocol, replay."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from ..cluster import Cluster
from ..decisions import Request
from ..fragmentation import FragModel
from ..inventory import Node
from ..policies import make_policy
from ..policies.amounts import total_demand
from ..workload import Workload
from .mig_variant import MIG_GEOMETRY, to_mig
from .protocol import prepare
from .replay import RunResult, replay
from .trace import load_nodes, load_pods


@lru_cache(maxsize=8)
def _nodes(path: str, mig: bool) -> tuple[Node, ...]:
    return tuple(load_nodes(Path(path), MIG_GEOMETRY if mig else None))


@lru_cache(maxsize=8)
def _pods(path: str, mig: bool) -> tuple[Request, ...]:
    pods = load_pods(Path(path))
    return tuple(to_mig(p) for p in pods) if mig else tuple(pods)


def run_one(nodes_csv: Path, pods_csv: Path, seed: int, policy: str, mig: bool = False) -> RunResult:
    nodes = _nodes(str(nodes_csv), mig)
    pods = _pods(str(pods_csv), mig)
    capacity = 1000.0 * sum(len(n.gpus) for n in nodes)
    proto = prepare(pods, len(nodes), capacity, seed, total_demand)
    cluster = Cluster(nodes, rank=proto.rank)
    # the "typical pods" of the base list: all classes for the policies (FGD keeps the top 95 %
    # itself), the top 95 % for the fragmentation metric (§3)
    workload = Workload.from_requests(pods, coverage=1.0)
    pol = make_policy(policy, workload=workload, seed=seed)
    return replay(cluster, pol, proto.sequence, FragModel(cluster, workload.top(0.95)), seed)

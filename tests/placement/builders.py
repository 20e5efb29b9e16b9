"""Small hand-made clusters for the placement tests."""

from __future__ import annotations

from placement import Cluster, Gpu, Node, Request, Workload
from placement.inventory import MigSlice

GIB = 1024


def node(name: str, cores: float, gpus: int, model: str = "A100", mem_gib: int = 256, used: tuple[int, ...] = (),
         cpu_used: float = 0.0, gpu_mem_gib: int = 80) -> Node:
    shares = list(used) + [0] * (gpus - len(used))
    return Node(name, int(cores * 1000), mem_gib * GIB,
                tuple(Gpu(i, model, gpu_mem_gib * GIB, shares[i]) for i in range(gpus)),
                cpu_used_milli=int(cpu_used * 1000))


def mig_node(name: str, gpus: int, geometry: str = "A100-80GB", cores: float = 64, mem_gib: int = 512,
             model: str = "A100-80GB", slices: dict[int, tuple[MigSlice, ...]] | None = None) -> Node:
    slices = slices or {}
    return Node(name, int(cores * 1000), mem_gib * GIB,
                tuple(Gpu(i, model, 80 * GIB, 0, geometry, slices.get(i, ())) for i in range(gpus)))


def shared(milli: int, cores: float = 1, models: tuple[str, ...] = ()) -> Request:
    return Request(int(cores * 1000), GIB, 1, milli, allowed_models=frozenset(models))


def whole(k: int, cores: float = 1, models: tuple[str, ...] = ()) -> Request:
    return Request(int(cores * 1000), GIB, k, 1000, allowed_models=frozenset(models))


def cpu_only(cores: float) -> Request:
    return Request(int(cores * 1000), GIB)


def mig(profile: str, k: int = 1, cores: float = 1) -> Request:
    return Request(int(cores * 1000), GIB, k, 0, profile)


def cluster(*nodes: Node, rank: list[int] | None = None) -> Cluster:
    return Cluster(list(nodes), rank=rank)


def workload(*requests: Request) -> Workload:
    return Workload.from_requests(requests, coverage=1.0)

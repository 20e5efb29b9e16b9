"""Our default policy: fragmentation gradient + resource-balance + model-scarcity ("FGD-B").

Three costs, all in GPU milli, summed per feasible node; the node with the smallest total wins
after quantising to ``quantum`` milli (equal buckets fall back to the node rank, which keeps
placements concentrated the way §6 of ``../shared/reference/placement-benchmark.md`` found
essential):

1. **Fragmentation gradient** -- the FGD rule (§4): the increase of node fragmentation F_n.
2. **Stranding** -- GPU capacity that the node's remaining CPU or memory cannot serve at the
   workload's average CPU-per-GPU and memory-per-GPU ratios:
   ``max(0, free_gpu - free_cpu / rho, free_gpu - free_mem / sigma)``. FGD only sees CPU when a
   class stops fitting altogether; this term sees a node drift out of balance long before that,
   steers CPU-heavy pods (and CPU-only pods) to CPU-rich nodes and rewards pods that restore
   the balance. On the default trace most GPUs lost by FGD at x = 100 % sit on nodes whose CPU
   ran out.
3. **Model scarcity** -- a price per GPU milli on each model (:func:`model_pressure`): the demand
   of classes constrained to it per GPU of that model, relative to the demand per GPU of the
   whole cluster; and task classes that accept only some models weigh more in F_n, in proportion
   to how small a share of the GPUs they may use (:func:`scarcity_weighted`). Flexible pods stop
   consuming the few GPUs that constrained pods need (FGD and the packers fall below Random on
   gpuspec33 for exactly this reason, §5). Nodes mixing GPU models carry no price.

The workload (task classes with weights) is the one FGD gets; ratios and prices use all its
classes, F_n the most popular ones covering ``coverage`` of the weight.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..arrays import BoolArray, FloatArray
from ..cluster import Cluster
from ..decisions import Request
from ..workload import TaskClass, Workload
from .amounts import node_free, total_demand
from .base import Choice, lowest_rank
from .delta_cache import DeltaCache
from .fgd import FragmentationPolicy


def scarcity_weighted(workload: Workload, cluster: Cluster, power: float = 1.0) -> Workload:
    """Scale each class by (all GPUs / GPUs of the models it accepts) ** power."""
    counts = np.bincount(cluster.gpu_model[cluster.gpu_present], minlength=len(cluster.models))
    total = max(int(counts.sum()), 1)
    out = []
    for c in workload.classes:
        if c.gpu_count and c.allowed_models:
            allowed = sum(int(counts[cluster.model_id[m]]) for m in c.allowed_models if m in cluster.model_id)
            factor = (total / allowed) ** power if allowed else 1.0
        else:
            factor = 1.0
        out.append(TaskClass(c.cpu_milli, c.gpu_milli, c.gpu_count, c.allowed_models, c.mig_profile,
                             c.weight * factor, c.memory_mib))
    return Workload(tuple(out))


def model_pressure(workload: Workload, cluster: Cluster) -> FloatArray:
    """Per model: GPU demand of model-constrained classes per GPU of that model, relative to the
    workload's demand per GPU of the whole cluster (0 when nothing is constrained to it).

    Each constrained class's demand is spread over the GPUs of the models it accepts.
    """
    counts = np.bincount(cluster.gpu_model[cluster.gpu_present], minlength=len(cluster.models)).astype(np.float64)
    pressure = np.zeros(len(cluster.models))
    total = 0.0
    for c in workload.classes:
        if not c.gpu_count:
            continue
        demand = c.weight * c.gpu_demand
        total += demand
        ids = [cluster.model_id[m] for m in c.allowed_models if m in cluster.model_id]
        if c.allowed_models and ids and len(ids) < len(cluster.models):
            pressure[ids] += demand / counts[ids].sum()
    if total <= 0:
        return pressure
    out: FloatArray = pressure / (total / max(counts.sum(), 1.0))
    return out


def balance_ratios(workload: Workload) -> tuple[float, float]:
    """(CPU milli, memory MiB) per GPU milli demanded by the workload's GPU classes."""
    gpu = sum(c.weight * c.gpu_demand for c in workload.classes if c.gpu_count)
    cpu = sum(c.weight * c.cpu_milli for c in workload.classes if c.gpu_count)
    mem = sum(c.weight * c.memory_mib for c in workload.classes if c.gpu_count)
    if gpu <= 0:
        return 0.0, 0.0
    return cpu / gpu, mem / gpu


class Ours(FragmentationPolicy):
    name: ClassVar[str] = "ours"

    def __init__(self, workload: Workload | None = None, *, strand_weight: float = 2.0, quantum: float = 80.0,
                 scarcity_power: float = 1.0, pressure_weight: float = 2.0, coverage: float = 0.95) -> None:
        super().__init__(workload, coverage)
        self.strand_weight = strand_weight
        self.quantum = quantum
        self.scarcity_power = scarcity_power
        self.pressure_weight = pressure_weight
        self._ratios: tuple[Workload, tuple[float, float]] | None = None
        self._pressure: tuple[Workload, Cluster, FloatArray] | None = None

    def _cache(self, cluster: Cluster, workload: Workload) -> DeltaCache:
        return DeltaCache(cluster, scarcity_weighted(workload.top(self.coverage), cluster, self.scarcity_power))

    def choose(self, cluster: Cluster, request: Request, feasible: BoolArray) -> Choice:
        d = self.deltas(cluster, request)
        cand = np.flatnonzero(feasible)
        cost = d.df[cand]
        if self.strand_weight:
            rho, sigma = self.ratios()
            gf = node_free(cluster, cand)
            cf = cluster.cpu_free[cand].astype(np.float64)
            mf = cluster.mem_free[cand].astype(np.float64)
            before = self._strand(gf, cf, mf, rho, sigma)
            after = self._strand(gf - total_demand(request), cf - request.cpu_milli, mf - request.memory_mib, rho, sigma)
            cost = cost + self.strand_weight * (after - before)
        if self.pressure_weight and request.gpu_count:
            pressure = self.pressure(cluster)
            if pressure.any():
                model = cluster.node_model[cand]
                per_node = np.where(model >= 0, pressure[np.maximum(model, 0)], 0.0)
                cost = cost + self.pressure_weight * total_demand(request) * per_node
        bucket = np.floor(cost / self.quantum)
        top = cand[bucket == bucket.min()]
        node = int(top[0]) if len(top) == 1 else lowest_rank(cluster, top)
        slots, starts = self.gpus_from(cluster, request, node, d)
        return node, slots, starts

    @staticmethod
    def _strand(gpu: FloatArray, cpu: FloatArray, mem: FloatArray, rho: float, sigma: float) -> FloatArray:
        s = np.zeros_like(gpu)
        if rho > 0:
            s = np.maximum(s, gpu - cpu / rho)
        if sigma > 0:
            s = np.maximum(s, gpu - mem / sigma)
        return s

    def ratios(self) -> tuple[float, float]:
        wl = self.current_workload()
        if self._ratios is None or self._ratios[0] is not wl:
            self._ratios = (wl, balance_ratios(wl))
        return self._ratios[1]

    def pressure(self, cluster: Cluster) -> FloatArray:
        wl = self.current_workload()
        if self._pressure is None or self._pressure[0] is not wl or self._pressure[1] is not cluster:
            self._pressure = (wl, cluster, model_pressure(wl, cluster))
        return self._pressure[2]

    def pick_node(self, cluster: Cluster, request: Request, feasible: BoolArray) -> int:
        return self.choose(cluster, request, feasible)[0]

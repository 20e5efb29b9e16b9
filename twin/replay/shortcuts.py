"""Cheap answers the victim choice would give anyway, so that a replay asks it less (docs/twin.md,
"Speed"). Each is exact: it only skips a plan whose result is known to be "nothing to take".

* **No room even with every grant that could be a candidate gone**: when quota admits a request
  of one unit and only the GPUs refuse it, ``victims.plan`` may take only grants of
  ``room_facts``, each at most all the units it has not yet given up, one at a time until the
  unit fits. Taking more units never makes the GPUs fuller, so if the unit does not fit with
  *all* of those units gone, no plan finds room. That count is made over a cheap superset of
  those grants (``HeldShares.room_after``, one sum of what each department's grants hold per
  GPU), before ``room_facts`` is asked: in the twin's tree (an organisation over flat
  departments, each holding exactly what its grants weigh) a grant has a fact only if its
  department holds more than its limit, or everything held exceeds the organisation's limit, or
  the request keeps its department within its guarantee and the grant's department holds more
  than its own guarantee (borrowed), or it is of a lower priority in the request's own
  department for a class that preempts. Which GPU the unit could use then is counted over the
  placement engine's arrays, counting for a node the GPUs of an allowed model with room (CPU and
  memory are not asked: units ask none in the twin): an upper bound of the engine's own
  feasibility, so "no node" is certain. Not counted on a pool with MIG nodes (a GPU a cut empties
  of MIG instances may take a whole GPU): the plan is asked there. (The same count over
  ``room_facts``' own grants, made after it, was dropped: where the superset's count said "maybe"
  it said "no" once in 1,176 plans of a month on 50 nodes, never in 9,593 on 400, and it walked
  every candidate unit, a tenth of the replay.)
* **Nothing changed since the same plan failed**: a plan is a function of the quota tree, the
  grants and the request; ``World`` counts every change of either (``World.version``), so a plan
  for the same department, class, shape, quantity and pool that failed at the same version fails
  again.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

import numpy as np
from numpy.typing import NDArray

from allocations.quotas import algebra
from placement import Cluster, Placement, Request
from placement.decisions import RequestKind
from twin.replay.state import Holding, Pools
from twin.workload import GPU_MILLI

ROOT = 0  # the organisation of the twin's quota tree (``world.quota_tree``)


def _has_mig_nodes(pools: Pools, pool: int) -> bool:
    """Whether the pool has MIG nodes, whose GPUs change mode as instances come and go
    (``mig_modes``): what a cut frees there is not counted in thousandths, so not here."""
    return bool(pools.modes and pools.modes[pool])


def _fits(cluster: Cluster, request: Request, free: NDArray[np.int64]) -> bool:
    """The engine's test of a share or of whole GPUs of an allowed model, on ``free`` (per GPU)."""
    allowed = cluster.model_masks(request.allowed_models)[0]
    if request.kind is RequestKind.SHARED:
        return bool((allowed & (free >= request.gpu_milli)).any())
    return bool(((allowed & (free == GPU_MILLI)).sum(axis=1) >= request.gpu_count).any())


def _over(tree: algebra.Tree, held: dict[tuple[int, algebra.Scope], Decimal], ask: algebra.Ask) -> tuple[set[int], bool]:
    """The departments whose grants ``room_facts`` could name, and whether all grants (the
    organisation beyond its limit). With nested departments, all grants: the facts below read
    each department's own holding against its own quota, not its subtree's."""
    if any(parent not in (ROOT, None) for parent in tree.parents.values()):
        return set(), True
    limits = tree.limits
    everything = sum(held.values(), Decimal(0)) > limits[(ROOT, None)].beyond
    over = {department for (department, scope), amount in held.items() if amount > limits[(department, scope)].beyond}
    mine = (ask.department_id, None)
    if held[mine] + ask.amounts[None] <= limits[mine].guaranteed:  # within its guarantee: borrowers may go
        over |= {department for (department, scope), amount in held.items()
                 if department != ask.department_id and amount > limits[(department, scope)].guaranteed}
    return over, everything


class HeldShares:
    """What the grants of each department and priority hold on each GPU of each pool, their units
    on the GPUs only (not those already leaving), in thousandths: the superset's count made as
    one sum of arrays instead of a walk over every candidate unit."""

    def __init__(self, pools: Pools) -> None:
        self.pools = pools
        self.held: dict[tuple[int, int, int], NDArray[np.int64]] = {}

    def add(self, holding: Holding, units: Iterable[Placement], sign: int) -> None:
        cluster = self.pools.clusters[holding.pool]
        key = (holding.pool, holding.department, holding.priority)
        held = self.held.get(key)
        if held is None:
            held = self.held[key] = np.zeros_like(cluster.gpu_free)
        for unit in units:
            row = cluster.index[unit.node]
            for label in unit.gpu_indices:
                held[row, cluster._slot[row][label]] += sign * unit.request.gpu_milli

    def room_after(self, pool: int, request: Request, tree: algebra.Tree,
                   amounts: dict[tuple[int, algebra.Scope], Decimal], ask: algebra.Ask) -> bool:
        """Whether one unit of ``request`` might fit on the pool once every grant ``room_facts`` could
        name is gone (``_over``'s departments, and the lower priorities of the request's own for a
        class that preempts), summed by department and priority (False: it certainly does not)."""
        if request.kind not in (RequestKind.SHARED, RequestKind.WHOLE) or _has_mig_nodes(self.pools, pool):
            return True
        over, everything = _over(tree, amounts, ask)
        free = self.pools.clusters[pool].gpu_free.copy()
        for (where, department, priority), held in self.held.items():
            if where == pool and (everything or department in over or (
                    ask.preempts_lower and department == ask.department_id and priority < ask.priority)):
                free += held
        return _fits(self.pools.clusters[pool], request, free)


class RoomBound:
    """An upper bound of ``CutView.fits`` for one unit of a share or of whole GPUs, asked before it
    with the same cuts: the GPUs the cut's units would free, counted over the placement engine's
    arrays against the pool as it stood when the plan began, where the unit did not fit (so it can
    fit only on a GPU or node the cut frees). "No" is certain (CPU and memory are not counted, as in
    ``HeldShares.room_after``); the count follows each cut by its difference from the last one, as the view does.
    Not counted on a pool with MIG nodes (``_has_mig_nodes``): there every cut may fit.

    Where it is counted and the unit asks no CPU or memory (as the twin's units do), "yes" is
    certain too (``exact``): the engine's test of one unit (``Cluster.feasible``) is, node by node,
    the same count of GPUs (``gpu_fit``) and room for the CPU and memory asked (``resource_fit``),
    which nothing fails then; the cut need not be released on the pool to be answered."""

    def __init__(self, pools: Pools, pool: int, request: Request, holdings: dict[int, Holding]) -> None:
        cluster = pools.clusters[pool]
        self.cluster, self.pool, self.request, self.holdings = cluster, pool, request, holdings
        self.counted = request.kind in (RequestKind.SHARED, RequestKind.WHOLE) and not _has_mig_nodes(pools, pool)
        self.exact = self.counted and request.cpu_milli == 0 and request.memory_mib == 0
        self.base = cluster.gpu_free.copy()
        self.allowed = cluster.model_masks(request.allowed_models)[0]
        self.full = (self.allowed & (self.base == GPU_MILLI)).sum(axis=1)  # per node, before the plan
        self.added: dict[tuple[int, int], int] = {}  # (node row, GPU slot) → thousandths the cut frees there
        self.on_node: dict[int, int] = {}  # node row → GPUs the cut makes wholly free (whole GPUs)
        self.fitting = 0  # GPUs (a share) or nodes (whole GPUs) where the unit may fit
        self.last: frozenset[tuple[int, int]] = frozenset()

    def may_fit(self, cut: frozenset[tuple[int, int]]) -> bool:
        if not self.counted:
            return True
        for gid, units in self.last - cut:
            self._count(gid, units, -1)
        for gid, units in cut - self.last:
            self._count(gid, units, +1)
        self.last = cut
        return self.fitting > 0

    def _count(self, gid: int, units: int, sign: int) -> None:
        holding = self.holdings.get(gid)
        if holding is None or holding.pool != self.pool:
            return
        end = len(holding.units) - holding.leaving
        for unit in holding.units[end - units:end]:
            row = self.cluster.index[unit.node]
            for label in unit.gpu_indices:
                self._gpu(row, self.cluster._slot[row][label], sign * unit.request.gpu_milli)

    def _gpu(self, row: int, slot: int, milli: int) -> None:
        key = (row, slot)
        before = self._fits(key)
        self.added[key] = self.added.get(key, 0) + milli
        change = self._fits(key) - before
        if not change:
            return
        if self.request.kind is RequestKind.SHARED:
            self.fitting += change
            return
        needed, full = self.request.gpu_count, int(self.full[row])
        was = full + self.on_node.get(row, 0) >= needed
        self.on_node[row] = self.on_node.get(row, 0) + change
        self.fitting += (full + self.on_node[row] >= needed) - was

    def _fits(self, key: tuple[int, int]) -> int:
        if not self.allowed[key]:
            return 0
        free = int(self.base[key]) + self.added[key] if key in self.added else int(self.base[key])
        return int(free >= self.request.gpu_milli if self.request.kind is RequestKind.SHARED else free == GPU_MILLI)

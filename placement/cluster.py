"""The mutable cluster state: what is free where, kept as numpy arrays for fast scoring.

``placing.place`` asks a policy for a decision without changing anything; ``apply`` books it and
``release`` returns exactly what ``apply`` took (so ``release(apply(p))`` restores the state).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from . import mig_tables
from .arrays import BoolArray, IntArray
from .decisions import Placement, Request, RequestKind
from .inventory import GPU_MILLI, Gpu, MigSlice, Node, nodes_from_records
from .mig import GEOMETRIES, MigState

SHARED_TAG = 0
"""Index of the 'GPU-sharing pod' column of :attr:`Cluster.tags`; column k counts k-GPU pods."""

_stamp = itertools.count(1)


@functools.cache
def _empty_mig_state(geometry: str) -> int:
    return mig_tables.encode(mig_tables.geometry_id(geometry), MigState())


def _node_model(models: IntArray) -> int:
    distinct = set(models.tolist())
    if not distinct:
        return -1
    return distinct.pop() if len(distinct) == 1 else -2


class Cluster:
    """Placement state of a set of nodes.

    Per-GPU arrays have shape ``[nodes, max GPUs per node]``; a slot without a GPU has model -1.
    ``gpu_free`` is the free milli of a shared-mode GPU and -1 for empty slots and MIG GPUs, so
    no share ever fits there. MIG GPUs keep their state as an index into
    :mod:`placement.mig_tables`.
    """

    def __init__(self, nodes: Sequence[Node], rank: Sequence[int] | None = None) -> None:
        if not nodes:
            raise ValueError("a cluster needs at least one node")
        self.names: list[str] = [n.name for n in nodes]
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        if len(self.index) != len(self.names):
            raise ValueError("duplicate node name")
        n = len(nodes)
        g = max(1, max(len(nd.gpus) for nd in nodes))
        self.max_gpus = g
        self.models: list[str] = sorted({gpu.model for nd in nodes for gpu in nd.gpus})
        self.model_id: dict[str, int] = {m: i for i, m in enumerate(self.models)}

        self.cpu_cap = np.array([nd.cpu_milli for nd in nodes], dtype=np.int64)
        self.mem_cap = np.array([nd.memory_mib for nd in nodes], dtype=np.int64)
        self.cpu_free = self.cpu_cap - np.array([nd.cpu_used_milli for nd in nodes], dtype=np.int64)
        self.mem_free = self.mem_cap - np.array([nd.memory_used_mib for nd in nodes], dtype=np.int64)
        self.gpu_label = np.full((n, g), -1, dtype=np.int64)
        self.gpu_model = np.full((n, g), -1, dtype=np.int64)
        self.gpu_mem = np.zeros((n, g), dtype=np.int64)
        self.gpu_free = np.full((n, g), -1, dtype=np.int64)
        self.mig_state = np.full((n, g), mig_tables.NO_MIG, dtype=np.int64)
        self.mig_instances: dict[tuple[int, int], list[MigSlice]] = {}
        self.tags = np.zeros((n, g + 1), dtype=np.int64)
        self.version = np.zeros(n, dtype=np.int64)
        self.rank = np.arange(n, dtype=np.int64) if rank is None else np.asarray(rank, dtype=np.int64)
        if sorted(self.rank.tolist()) != list(range(n)):
            raise ValueError("rank must be a permutation of 0..len(nodes)-1")
        self._slot: list[dict[int, int]] = []
        self.cache: dict[Any, Any] = {}
        """Scratch space for policies (keyed by the policy); never part of the state."""

        for i, nd in enumerate(nodes):
            self._slot.append(self._gpus_fill(i, nd))
        self.gpu_present = self.gpu_model >= 0
        self.shared_gpu = self.gpu_present & (self.mig_state == mig_tables.NO_MIG)
        self.node_model = np.array([_node_model(self.gpu_model[i, : len(nd.gpus)]) for i, nd in enumerate(nodes)],
                                   dtype=np.int64)
        """Model id of a node whose GPUs are all one model; -1 no GPUs; -2 mixed models."""
        self.gpu_cap_milli = int(self.shared_gpu.sum()) * GPU_MILLI
        self.mig_gpus = int((self.gpu_present & ~self.shared_gpu).sum())
        self.max_free = np.zeros(n, dtype=np.int64)
        self.full_count = np.zeros(n, dtype=np.int64)
        self.free_milli = np.zeros(n, dtype=np.int64)
        self._refresh_aggregates(np.arange(n))
        self._model_masks: dict[frozenset[str], tuple[BoolArray, BoolArray]] = {}

    # ----------------------------------------------------------------- construction
    def _gpus_fill(self, i: int, node: Node) -> dict[int, int]:
        """Write row ``i``'s GPUs (the row is empty); returns GPU index → slot."""
        slots: dict[int, int] = {}
        for j, gpu in enumerate(sorted(node.gpus, key=lambda x: x.index)):
            slots[gpu.index] = j
            self.gpu_label[i, j] = gpu.index
            self.gpu_model[i, j] = self.model_id[gpu.model]
            self.gpu_mem[i, j] = gpu.memory_mib
            if gpu.mig_geometry is None:
                self.gpu_free[i, j] = GPU_MILLI - gpu.used_milli
            else:
                self._init_mig(i, j, gpu)
        return slots

    def _init_mig(self, i: int, j: int, gpu: Gpu) -> None:
        assert gpu.mig_geometry is not None
        if gpu.mig_geometry not in GEOMETRIES:
            raise ValueError(f"unknown MIG geometry {gpu.mig_geometry!r}")
        geo = GEOMETRIES[gpu.mig_geometry]
        if not gpu.mig_slices:  # the common case on a large cluster: one lookup per geometry
            self.mig_state[i, j] = _empty_mig_state(geo.name)
            return
        state = geo.held(gpu.mig_slices)  # bookings that never meet in time share slices
        self.mig_state[i, j] = mig_tables.encode(mig_tables.geometry_id(geo.name), state)
        self.mig_instances[(i, j)] = list(gpu.mig_slices)

    @classmethod
    def from_records(
        cls,
        nodes: Iterable[Mapping[str, Any]],
        reservations: Iterable[Mapping[str, Any]] = (),
        rank: Sequence[int] | None = None,
    ) -> Cluster:
        """Build the state from plain data: node rows (see :func:`node_from_record`) and
        reservation rows as written by :meth:`Placement.to_record`, which are re-applied."""
        cluster = cls(nodes_from_records(nodes), rank=rank)
        for r in reservations:
            cluster.apply(Placement.from_record(r))
        return cluster

    # ----------------------------------------------------------------- kept state
    def copy(self) -> Cluster:
        """An independent copy to place on (a kept state is never changed by a placement). The
        policies' scratch space starts empty; the node versions are kept, so per-node caches keyed
        by them stay meaningful."""
        other = Cluster.__new__(Cluster)
        other.__dict__.update(self.__dict__)
        for name in ("cpu_cap", "mem_cap", "cpu_free", "mem_free", "gpu_label", "gpu_model", "gpu_mem", "gpu_free",
                     "mig_state", "tags", "version", "gpu_present", "shared_gpu", "node_model", "max_free",
                     "full_count", "free_milli"):
            setattr(other, name, getattr(self, name).copy())
        other.mig_instances = {key: list(value) for key, value in self.mig_instances.items()}
        other._slot = list(self._slot)
        other.cache = {}
        other._model_masks = dict(self._model_masks)
        return other

    def node_replace(self, i: int, node: Node) -> bool:
        """Make row ``i`` exactly what ``Cluster([... node ...])`` would hold for ``node`` (same
        name), its usage included. False, changing nothing, when the row cannot hold it (more
        GPUs than the widest node, or a GPU model this state does not know): build afresh then."""
        if node.name != self.names[i] or len(node.gpus) > self.max_gpus:
            return False
        if any(gpu.model not in self.model_id for gpu in node.gpus):
            return False
        if any(gpu.mig_geometry is not None and gpu.mig_geometry not in GEOMETRIES for gpu in node.gpus):
            return False
        self.cpu_cap[i], self.mem_cap[i] = node.cpu_milli, node.memory_mib
        self.cpu_free[i] = node.cpu_milli - node.cpu_used_milli
        self.mem_free[i] = node.memory_mib - node.memory_used_mib
        for row in (self.gpu_label, self.gpu_model, self.gpu_free):
            row[i] = -1
        self.gpu_mem[i] = 0
        self.mig_state[i] = mig_tables.NO_MIG
        self.tags[i] = 0
        for j in range(self.max_gpus):
            self.mig_instances.pop((i, j), None)
        self._slot[i] = self._gpus_fill(i, node)
        self.gpu_present[i] = self.gpu_model[i] >= 0
        self.shared_gpu[i] = self.gpu_present[i] & (self.mig_state[i] == mig_tables.NO_MIG)
        self.node_model[i] = _node_model(self.gpu_model[i, : len(node.gpus)])
        self.gpu_cap_milli = int(self.shared_gpu.sum()) * GPU_MILLI
        self.mig_gpus = int((self.gpu_present & ~self.shared_gpu).sum())
        self._refresh_aggregates([i])
        self._model_masks = {}
        self.version[i] = next(_stamp)
        return True

    def gpu_mode_set(self, i: int, j: int, geometry: str | None) -> None:
        """Turn the empty GPU in row ``i``, slot ``j`` to MIG mode of ``geometry`` (None: shared
        mode), as a GPU of a node under the mixed MIG strategy becomes whichever its first unit
        needs (the portal's ``allocations.booking.view``). Raises ``ValueError`` where anything is
        booked on it or the geometry is unknown."""
        if self.gpu_model[i, j] < 0:
            raise ValueError(f"no GPU in slot {j} of node {self.names[i]}")
        empty = not self.mig_instances.get((i, j)) if self.mig_state[i, j] != mig_tables.NO_MIG \
            else self.gpu_free[i, j] == GPU_MILLI
        if not empty:
            raise ValueError(f"GPU {self.gpu_label[i, j]} on {self.names[i]} is in use: its mode cannot change")
        if geometry is not None and geometry not in GEOMETRIES:
            raise ValueError(f"unknown MIG geometry {geometry!r}")
        self.mig_instances.pop((i, j), None)
        if geometry is None:
            self.mig_state[i, j], self.gpu_free[i, j] = mig_tables.NO_MIG, GPU_MILLI
        else:
            self.mig_state[i, j], self.gpu_free[i, j] = _empty_mig_state(geometry), -1
        self.shared_gpu[i, j] = geometry is None
        self.gpu_cap_milli = int(self.shared_gpu.sum()) * GPU_MILLI
        self.mig_gpus = int((self.gpu_present & ~self.shared_gpu).sum())
        self._refresh_aggregates([i])
        self.version[i] = next(_stamp)

    # ----------------------------------------------------------------- derived views
    def _refresh_aggregates(self, rows: IntArray | list[int]) -> None:
        free = self.gpu_free[rows]
        self.max_free[rows] = free.max(axis=1)
        self.full_count[rows] = (free == GPU_MILLI).sum(axis=1)
        self.free_milli[rows] = np.where(free > 0, free, 0).sum(axis=1)

    def model_masks(self, allowed: frozenset[str]) -> tuple[BoolArray, BoolArray]:
        """(per-GPU-slot mask, per-node mask) of GPUs whose model is allowed (empty = any)."""
        hit = self._model_masks.get(allowed)
        if hit is None:
            if allowed:
                ids = [self.model_id[m] for m in allowed if m in self.model_id]
                gpu_ok = np.isin(self.gpu_model, np.array(ids, dtype=np.int64)) & self.gpu_present
            else:
                gpu_ok = self.gpu_present.copy()
            node_ok: BoolArray = np.asarray(gpu_ok.any(axis=1), dtype=np.bool_)
            hit = (gpu_ok, node_ok)
            self._model_masks[allowed] = hit
        return hit

    def uniform_models(self) -> bool:
        return bool((self.node_model != -2).all())

    # ----------------------------------------------------------------- feasibility
    def resource_fit(self, request: Request) -> BoolArray:
        fit: BoolArray = (self.cpu_free >= request.cpu_milli) & (self.mem_free >= request.memory_mib)
        return fit

    def gpu_candidates(self, request: Request, rows: IntArray | slice = slice(None)) -> BoolArray:
        """Per GPU slot (of ``rows``): can this GPU take its part of ``request``?"""
        gpu_ok = self.model_masks(request.allowed_models)[0][rows]
        kind = request.kind
        if kind is RequestKind.SHARED:
            out: BoolArray = gpu_ok & (self.gpu_free[rows] >= request.gpu_milli)
        elif kind is RequestKind.WHOLE:
            out = gpu_ok & (self.gpu_free[rows] == GPU_MILLI)
        elif kind is RequestKind.MIG:
            assert request.mig_profile is not None
            out = gpu_ok & mig_tables.legal_table(request.mig_profile)[self.mig_state[rows]]
        else:
            out = np.zeros_like(gpu_ok)
        return out

    def gpu_fit(self, request: Request) -> BoolArray:
        """Per node: enough suitable GPU capacity for ``request`` (CPU/memory not checked)."""
        kind = request.kind
        if kind is RequestKind.CPU_ONLY:
            return np.ones(len(self.names), dtype=np.bool_)
        if kind is not RequestKind.MIG and (not request.allowed_models or self.uniform_models()):
            node_ok = self.model_masks(request.allowed_models)[1]
            if kind is RequestKind.SHARED:
                fit: BoolArray = node_ok & (self.max_free >= request.gpu_milli)
            else:
                fit = node_ok & (self.full_count >= request.gpu_count)
            return fit
        counts = self.gpu_candidates(request).sum(axis=1)
        fit = counts >= request.gpu_count
        return fit

    def feasible(self, request: Request) -> BoolArray:
        """Per node: does ``request`` fit there now (CPU, memory, model and GPU capacity)?"""
        fit: BoolArray = self.resource_fit(request) & self.gpu_fit(request)
        return fit

    # ----------------------------------------------------------------- decisions
    def _resolve(self, placement: Placement) -> tuple[int, list[int]]:
        try:
            i = self.index[placement.node]
        except KeyError:
            raise ValueError(f"unknown node {placement.node!r}") from None
        try:
            slots = [self._slot[i][label] for label in placement.gpu_indices]
        except KeyError:
            raise ValueError(f"node {placement.node} has no GPU {placement.gpu_indices}") from None
        return i, slots

    def check(self, placement: Placement) -> str | None:
        """Why ``placement`` cannot be booked now, or None if it can."""
        req = placement.request
        problem = req.problem()
        if problem:
            return problem
        i, slots = self._resolve(placement)
        if self.cpu_free[i] < req.cpu_milli or self.mem_free[i] < req.memory_mib:
            return f"node {placement.node} lacks CPU or memory"
        if len(slots) != req.gpu_count or len(set(slots)) != len(slots):
            return f"placement names {len(slots)} distinct GPUs, request asks for {req.gpu_count}"
        if req.kind is RequestKind.MIG:
            if len(placement.mig_starts) != len(slots):
                return "a MIG placement needs one start slot per GPU"
            for j, start in zip(slots, placement.mig_starts, strict=True):
                legal = self.legal_mig_starts(i, j, req)
                if start not in legal:
                    return f"{req.mig_profile} cannot start at slice {start} on GPU {self.gpu_label[i, j]}"
            return None
        if placement.mig_starts:
            return "MIG start slots given for a non-MIG request"
        ok = self.gpu_candidates(req, np.array([i]))[0]
        for j in slots:
            if not ok[j]:
                return f"GPU {self.gpu_label[i, j]} on {placement.node} cannot take {req.describe()}"
        return None

    def legal_mig_starts(self, node: int, slot: int, request: Request) -> tuple[int, ...]:
        if request.mig_profile is None:
            return ()
        gpu_ok = self.model_masks(request.allowed_models)[0]
        if not gpu_ok[node, slot] or self.mig_state[node, slot] == mig_tables.NO_MIG:
            return ()
        gid, state = mig_tables.decode(int(self.mig_state[node, slot]))
        geo = GEOMETRIES[mig_tables.GEOMETRY_NAMES[gid]]
        prof = geo.by_name.get(request.mig_profile)
        return () if prof is None else geo.legal_starts(state, prof)

    def apply(self, placement: Placement) -> Placement:
        """Book ``placement``; raises ``ValueError`` if it no longer fits."""
        problem = self.check(placement)
        if problem is not None:
            raise ValueError(problem)
        self._book(placement, +1)
        return placement

    def release(self, placement: Placement) -> None:
        """Return everything ``placement`` booked (it must have been applied)."""
        req = placement.request
        i, slots = self._resolve(placement)
        if req.kind is RequestKind.MIG:
            for j, start in zip(slots, placement.mig_starts, strict=True):
                inst = self.mig_instances.get((i, j), [])
                if MigSlice(str(req.mig_profile), start) not in inst:
                    raise ValueError(f"no {req.mig_profile} at slice {start} on GPU {self.gpu_label[i, j]}")
        elif req.gpu_count:
            for j in slots:
                if self.gpu_free[i, j] < 0 or self.gpu_free[i, j] + req.gpu_milli > GPU_MILLI:
                    raise ValueError(f"GPU {self.gpu_label[i, j]} on {placement.node} does not hold this share")
        if self.cpu_free[i] + req.cpu_milli > self.cpu_cap[i] or self.mem_free[i] + req.memory_mib > self.mem_cap[i]:
            raise ValueError(f"node {placement.node} does not hold this reservation")
        self._book(placement, -1)

    def _book(self, placement: Placement, sign: int) -> None:
        req = placement.request
        i, slots = self._resolve(placement)
        self.cpu_free[i] -= sign * req.cpu_milli
        self.mem_free[i] -= sign * req.memory_mib
        if req.kind is RequestKind.MIG:
            assert req.mig_profile is not None
            for j, start in zip(slots, placement.mig_starts, strict=True):
                gid, state = mig_tables.decode(int(self.mig_state[i, j]))
                geo = GEOMETRIES[mig_tables.GEOMETRY_NAMES[gid]]
                prof = geo.profile(req.mig_profile)
                inst = self.mig_instances.setdefault((i, j), [])
                if sign > 0:
                    state = geo.add(state, prof, start)
                    inst.append(MigSlice(prof.name, start))
                else:
                    state = geo.remove(state, prof, start)
                    inst.remove(MigSlice(prof.name, start))
                self.mig_state[i, j] = mig_tables.encode(gid, state)
        else:
            for j in slots:
                self.gpu_free[i, j] -= sign * req.gpu_milli
        if req.gpu_count:
            tag = SHARED_TAG if req.kind in (RequestKind.SHARED, RequestKind.MIG) else min(req.gpu_count, self.max_gpus)
            self.tags[i, tag] += sign
            self._refresh_aggregates([i])
        self.version[i] = next(_stamp)

    # ----------------------------------------------------------------- reporting
    def allocated_milli(self) -> int:
        """GPU milli reserved on shared-mode GPUs."""
        return self.gpu_cap_milli - int(self.free_milli.sum())

    def mig_compute_used(self) -> int:
        free = mig_tables.free_compute_table()[self.mig_state[self.gpu_present & ~self.shared_gpu]]
        return self.mig_gpus * 7 - int(free.sum())

    def snapshot(self) -> dict[str, Any]:
        """All mutable state as plain data (equal snapshots = identical states)."""
        return {
            "cpu_free": self.cpu_free.tolist(),
            "mem_free": self.mem_free.tolist(),
            "gpu_free": self.gpu_free.tolist(),
            "mig_state": self.mig_state.tolist(),
            "mig_instances": {k: sorted(v, key=lambda s: s.start) for k, v in self.mig_instances.items() if v},
            "tags": self.tags.tolist(),
        }

    def nodes(self) -> list[Node]:
        """The current inventory, usage included (e.g. to persist or display)."""
        out = []
        for i, name in enumerate(self.names):
            gpus = []
            for label, j in sorted(self._slot[i].items()):
                model = self.models[int(self.gpu_model[i, j])]
                if self.mig_state[i, j] == mig_tables.NO_MIG:
                    gpus.append(Gpu(label, model, int(self.gpu_mem[i, j]), GPU_MILLI - int(self.gpu_free[i, j])))
                else:
                    gid, _ = mig_tables.decode(int(self.mig_state[i, j]))
                    gpus.append(
                        Gpu(label, model, int(self.gpu_mem[i, j]), 0, mig_tables.GEOMETRY_NAMES[gid],
                            tuple(sorted(self.mig_instances.get((i, j), []), key=lambda s: s.start)))
                    )
            out.append(
                Node(name, int(self.cpu_cap[i]), int(self.mem_cap[i]), tuple(gpus),
                     int(self.cpu_cap[i] - self.cpu_free[i]), int(self.mem_cap[i] - self.mem_free[i]))
            )
        return out

"""The exact offline optimum of a small MIG packing instance, with OR-Tools CP-SAT.

Used to measure how far the online slice planner is from the best possible packing: maximise
the compute slices of the MIG requests placed (each request all-or-nothing, k instances on k
distinct GPUs of one node), subject to node CPU/memory, model constraints, legal start slots,
non-overlapping memory slices, at most 7 compute slices and one ``+me`` instance per GPU.
Existing MIG instances in the inventory stay where they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from .decisions import Placement, Request, RequestKind
from .inventory import Node
from .mig import COMPUTE_SLICES, GEOMETRIES, MEMORY_SLICES, MigGeometry, MigState


@dataclass(frozen=True)
class Optimum:
    slices: int
    placements: tuple[Placement, ...]
    proven: bool


def _state(geometry: str, node: Node, gpu_pos: int) -> MigState:
    return GEOMETRIES[geometry].held(node.gpus[gpu_pos].mig_slices)


@dataclass(frozen=True)
class _Variables:
    """The decisions of the model: ``place[i, n]`` puts request i on node n, ``inst[i, n, j, s]``
    starts one of its instances at slot s of the node's GPU j; ``objective`` the placed slices."""

    place: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)
    inst: dict[tuple[int, int, int, int], cp_model.IntVar] = field(default_factory=dict)
    objective: list[cp_model.LinearExprT] = field(default_factory=list)


def mig_optimum(nodes: Sequence[Node], requests: Sequence[Request], time_limit_s: float = 10.0,
                workers: int = 1) -> Optimum:
    """Best total compute slices for ``requests`` (non-MIG requests are ignored)."""
    model = cp_model.CpModel()
    reqs = [(i, r) for i, r in enumerate(requests) if r.kind is RequestKind.MIG and r.problem() is None]
    var = _Variables()
    for i, r in reqs:
        _add_request(model, var, nodes, i, r)
    # unused instance variables of a node the request does not go to are forced to 0 by the sum
    for (i, n, _j, _s), v in var.inst.items():
        if (i, n) not in var.place:
            model.add(v == 0)
    for n, node in enumerate(nodes):
        _add_node_limits(model, var, requests, n, node)
    model.maximize(sum(var.objective))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = workers
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Optimum(0, (), False)
    slices = int(round(solver.objective_value))
    # a packing that uses every slice (or serves every request) is optimal whatever the solver proved
    capacity = COMPUTE_SLICES * sum(1 for nd in nodes for g in nd.gpus if g.mig_geometry is not None)
    demand = sum(_compute(r) * r.gpu_count for _, r in reqs)
    proven = status == cp_model.OPTIMAL or slices in (capacity, demand)
    return Optimum(slices, _placements(solver, var, nodes, requests), proven)


def _add_request(model: cp_model.CpModel, var: _Variables, nodes: Sequence[Node], i: int, r: Request) -> None:
    """Request i placed whole on at most one node: k instances on k distinct GPUs of it."""
    assert r.mig_profile is not None
    for n, node in enumerate(nodes):
        if r.cpu_milli > node.cpu_milli - node.cpu_used_milli or r.memory_mib > node.memory_mib - node.memory_used_mib:
            continue
        per_gpu = _instance_starts(model, var, (i, n), r, node)
        if len(per_gpu) < r.gpu_count:
            continue
        y = model.new_bool_var(f"y{i}_{n}")
        var.place[(i, n)] = y
        model.add(sum(v for vs in per_gpu for v in vs) == r.gpu_count * y)
        var.objective.append(y * (_compute(r) * r.gpu_count))
    ys = [v for (ii, _n), v in var.place.items() if ii == i]
    if ys:
        model.add_at_most_one(ys)


def _instance_starts(model: cp_model.CpModel, var: _Variables, at: tuple[int, int], r: Request,
                     node: Node) -> list[list[cp_model.IntVar]]:
    """For request and node ``at``, per GPU that may host the profile: one variable per legal
    start, at most one of them chosen."""
    i, n = at
    per_gpu: list[list[cp_model.IntVar]] = []
    for j, gpu in enumerate(node.gpus):
        if gpu.mig_geometry is None or (r.allowed_models and gpu.model not in r.allowed_models):
            continue
        geo = GEOMETRIES[gpu.mig_geometry]
        prof = geo.by_name.get(str(r.mig_profile))
        if prof is None:
            continue
        starts = geo.legal_starts(_state(gpu.mig_geometry, node, j), prof)
        vs = []
        for s in starts:
            v = model.new_bool_var(f"x{i}_{n}_{j}_{s}")
            var.inst[(i, n, j, s)] = v
            vs.append(v)
        if vs:
            model.add_at_most_one(vs)
            per_gpu.append(vs)
    return per_gpu


def _add_node_limits(model: cp_model.CpModel, var: _Variables, requests: Sequence[Request], n: int,
                     node: Node) -> None:
    """The node's free CPU and memory, and each MIG GPU's free slices, bound what goes to it."""
    on_node = [(i, v) for (i, nn), v in var.place.items() if nn == n]
    if not on_node:
        return
    model.add(sum(v * requests[i].cpu_milli for i, v in on_node) <= node.cpu_milli - node.cpu_used_milli)
    model.add(sum(v * requests[i].memory_mib for i, v in on_node) <= node.memory_mib - node.memory_used_mib)
    for j, gpu in enumerate(node.gpus):
        if gpu.mig_geometry is None:
            continue
        here = [(requests[i], s, v) for (i, nn, jj, s), v in var.inst.items() if nn == n and jj == j]
        if here:
            _add_gpu_limits(model, GEOMETRIES[gpu.mig_geometry], _state(gpu.mig_geometry, node, j), here)


def _add_gpu_limits(model: cp_model.CpModel, geo: MigGeometry, st: MigState,
                    here: list[tuple[Request, int, cp_model.IntVar]]) -> None:
    """On one GPU: no memory slice used twice or already held, at most 7 compute slices in all,
    at most one ``+me`` instance."""
    for slot in range(MEMORY_SLICES):
        if st.mask >> slot & 1:
            continue
        cover = [v for r, s, v in here
                 if s <= slot < s + geo.profile(str(r.mig_profile)).memory_slices]
        if len(cover) > 1:
            model.add_at_most_one(cover)
    model.add(sum(v * geo.profile(str(r.mig_profile)).compute for r, s, v in here)
              <= COMPUTE_SLICES - st.compute)
    media = [v for r, s, v in here if geo.profile(str(r.mig_profile)).media_extensions]
    if media:
        model.add(sum(media) <= 1 - st.media)


def _placements(solver: cp_model.CpSolver, var: _Variables, nodes: Sequence[Node],
                requests: Sequence[Request]) -> tuple[Placement, ...]:
    """The placements of the solver's answer."""
    placements = []
    for (i, n), y in var.place.items():
        if solver.value(y):
            chosen = sorted((j, s) for (ii, nn, j, s), v in var.inst.items() if ii == i and nn == n and solver.value(v))
            node = nodes[n]
            placements.append(Placement(requests[i], node.name, tuple(node.gpus[j].index for j, _ in chosen),
                                        tuple(s for _, s in chosen), "cp-sat"))
    return tuple(placements)


def _compute(r: Request) -> int:
    return next(g.by_name[str(r.mig_profile)].compute for g in GEOMETRIES.values() if r.mig_profile in g.by_name)

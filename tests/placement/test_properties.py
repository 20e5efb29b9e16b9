"""Hypothesis properties: no policy ever over-books CPU, memory, GPU shares or MIG slices,
breaks a model constraint or an illegal MIG geometry; rejections only happen when nothing fits;
release restores the exact prior state.

Every check is made against an independent ledger built from the inventory and the placements,
not against the engine's own bookkeeping.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement import (
    GEOMETRIES,
    POLICY_NAMES,
    Cluster,
    Gpu,
    Node,
    Placement,
    Rejection,
    RejectionKind,
    Request,
    RequestKind,
    make_policy,
)
from placement.mig import MigState
from placement.placing import place

MODELS = ("A", "B", "C")
PROFILES = sorted({p.name for g in GEOMETRIES.values() for p in g.profiles})


@st.composite
def inventories(draw: st.DrawFn) -> list[Node]:
    nodes = []
    for i in range(draw(st.integers(1, 4))):
        k = draw(st.integers(0, 4))
        model = draw(st.sampled_from(MODELS))
        mixed = draw(st.integers(0, 4)) == 0  # now and then a node with several GPU models
        geometry = draw(st.sampled_from([None, None, *sorted(GEOMETRIES)])) if k else None
        gpus = tuple(Gpu(j, draw(st.sampled_from(MODELS)) if mixed else model, 80 * 1024, 0, geometry)
                     for j in range(k))
        nodes.append(Node(f"n{i}", draw(st.integers(0, 32)) * 1000, draw(st.integers(0, 64)) * 1024, gpus))
    return nodes


@st.composite
def requests(draw: st.DrawFn) -> Request:
    kind = draw(st.sampled_from(["cpu", "shared", "whole", "mig"]))
    cpu = draw(st.integers(0, 12)) * 1000
    mem = draw(st.integers(0, 24)) * 1024
    models = draw(st.frozensets(st.sampled_from(MODELS), max_size=2))
    if kind == "cpu":
        return Request(cpu, mem)
    if kind == "shared":
        return Request(cpu, mem, 1, draw(st.sampled_from([100, 250, 300, 470, 500, 810, 999])), None, models)
    if kind == "whole":
        return Request(cpu, mem, draw(st.integers(1, 3)), 1000, None, models)
    return Request(cpu, mem, draw(st.integers(1, 2)), 0, draw(st.sampled_from(PROFILES)), models)


@dataclass
class Ledger:
    """Usage recomputed from scratch out of the placements currently held."""

    nodes: dict[str, Node]
    held: list[Placement] = field(default_factory=list)

    def usage(self) -> tuple[dict[str, int], dict[str, int], dict[tuple[str, int], int], dict[tuple[str, int], list[
            tuple[str, int]]]]:
        cpu: dict[str, int] = defaultdict(int)
        mem: dict[str, int] = defaultdict(int)
        share: dict[tuple[str, int], int] = defaultdict(int)
        slices: dict[tuple[str, int], list[tuple[str, int]]] = defaultdict(list)
        for p in self.held:
            cpu[p.node] += p.request.cpu_milli
            mem[p.node] += p.request.memory_mib
            if p.request.kind is RequestKind.MIG:
                for g, s in zip(p.gpu_indices, p.mig_starts, strict=True):
                    slices[(p.node, g)].append((str(p.request.mig_profile), s))
            else:
                for g in p.gpu_indices:
                    share[(p.node, g)] += p.request.gpu_milli
        return cpu, mem, share, slices

    def check(self) -> None:
        cpu, mem, share, slices = self.usage()
        for name, nd in self.nodes.items():
            assert cpu[name] <= nd.cpu_milli, f"CPU over-booked on {name}"
            assert mem[name] <= nd.memory_mib, f"memory over-booked on {name}"
            for gpu in nd.gpus:
                if gpu.mig_geometry is None:
                    assert share[(name, gpu.index)] <= 1000, f"GPU share over-booked on {name}/{gpu.index}"
                    assert not slices[(name, gpu.index)]
                else:
                    assert not share[(name, gpu.index)]
                    mig_state(gpu, slices[(name, gpu.index)])  # raises on an illegal layout

    def fits_somewhere(self, r: Request) -> bool:
        cpu, mem, share, slices = self.usage()
        for name, nd in self.nodes.items():
            if nd.cpu_milli - cpu[name] < r.cpu_milli or nd.memory_mib - mem[name] < r.memory_mib:
                continue
            ok = [g for g in nd.gpus if not r.allowed_models or g.model in r.allowed_models]
            if r.kind is RequestKind.CPU_ONLY:
                return True
            if r.kind is RequestKind.SHARED:
                good = [g for g in ok if g.mig_geometry is None and 1000 - share[(name, g.index)] >= r.gpu_milli]
            elif r.kind is RequestKind.WHOLE:
                good = [g for g in ok if g.mig_geometry is None and share[(name, g.index)] == 0]
            else:
                good = []
                for g in ok:
                    geo = GEOMETRIES.get(g.mig_geometry or "")
                    if geo is None or str(r.mig_profile) not in geo.by_name:
                        continue
                    st_ = mig_state(g, slices[(name, g.index)])
                    if geo.legal_starts(st_, geo.profile(str(r.mig_profile))):
                        good.append(g)
            if len(good) >= r.gpu_count:
                return True
        return False


def mig_state(gpu: Gpu, instances: list[tuple[str, int]]) -> MigState:
    geo = GEOMETRIES[str(gpu.mig_geometry)]
    st_ = MigState()
    for profile, start in instances:
        st_ = geo.add(st_, geo.profile(profile), start)  # ValueError if illegal
    assert st_.compute <= 7
    return st_


SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(inventories(), st.lists(requests(), min_size=1, max_size=14), st.sampled_from(POLICY_NAMES))
def test_no_policy_overbooks_breaks_models_or_mig_geometry_and_rejects_only_when_nothing_fits(
        nodes: list[Node], seq: list[Request], policy_name: str) -> None:
    cluster = Cluster(nodes)
    policy = make_policy(policy_name, seed=1)
    ledger = Ledger({n.name: n for n in nodes})
    by_name = {n.name: n for n in nodes}
    for r in seq:
        d = place(cluster, r, policy)
        if isinstance(d, Rejection):
            assert d.reason
            if d.kind is not RejectionKind.INVALID:
                assert not ledger.fits_somewhere(r), f"{policy_name} rejected a request that fits: {d.reason}"
            continue
        assert len(d.gpu_indices) == r.gpu_count and len(set(d.gpu_indices)) == r.gpu_count
        gpus = {g.index: g for g in by_name[d.node].gpus}
        for g in d.gpu_indices:
            assert not r.allowed_models or gpus[g].model in r.allowed_models, "model constraint broken"
            assert (gpus[g].mig_geometry is not None) == (r.kind is RequestKind.MIG)
        cluster.apply(d)
        ledger.held.append(d)
        ledger.check()


@SETTINGS
@given(inventories(), st.lists(requests(), min_size=1, max_size=14), st.sampled_from(POLICY_NAMES),
       st.randoms(use_true_random=False))
def test_release_restores_the_exact_prior_state(nodes: list[Node], seq: list[Request], policy_name: str,
                                                 rnd: random.Random) -> None:
    cluster = Cluster(nodes)
    policy = make_policy(policy_name, seed=2)
    initial = cluster.snapshot()
    held = []
    for r in seq:
        d = place(cluster, r, policy)
        if isinstance(d, Placement):
            before = cluster.snapshot()
            cluster.apply(d)
            cluster.release(d)
            assert cluster.snapshot() == before
            cluster.apply(d)
            held.append(d)
    rnd.shuffle(held)
    for p in held:
        cluster.release(p)
    assert cluster.snapshot() == initial

"""The slice planner against the exact CP-SAT optimum on tiny MIG instances."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from placement import Cluster, Placement, Request, make_policy
from placement.mig import GEOMETRIES, mig_compute
from placement.mig_optimum import mig_optimum
from placement.placing import place

from .builders import mig, mig_node

GEO = GEOMETRIES["A100-80GB"]
PROFILES = [p.name for p in GEO.profiles]


def online_slices(nodes: list, seq: list[Request], policy: str = "ours") -> int:  # type: ignore[type-arg]
    c = Cluster(nodes)
    pol = make_policy(policy)
    used = 0
    for r in seq:
        d = place(c, r, pol)
        if isinstance(d, Placement):
            c.apply(d)
            used += mig_compute(str(r.mig_profile)) * r.gpu_count
    return used


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 2), st.lists(st.sampled_from(PROFILES), min_size=1, max_size=7), st.sampled_from(["ours",
                                                                                                        "firstfit"]))
def test_cpsat_optimum_bounds_the_online_planner_and_its_placements_are_legal(
        gpus: int, profiles: list[str], policy: str) -> None:
    nodes = [mig_node("n0", gpus), mig_node("n1", 1)]
    seq = [mig(p) for p in profiles]
    opt = mig_optimum(nodes, seq)
    assert opt.proven
    assert online_slices(nodes, seq, policy) <= opt.slices <= sum(mig_compute(p) for p in profiles)
    c = Cluster(nodes)
    for p in opt.placements:  # every placement of the optimum is bookable, together
        c.apply(p)
    assert c.mig_compute_used() == opt.slices


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([p for p in PROFILES if not p.endswith("+me")]), min_size=1, max_size=7))
def test_planner_fills_one_gpu_whenever_the_optimum_fits_every_profile_largest_first(profiles: list[str]) -> None:
    nodes = [mig_node("n", 1)]
    seq = sorted((mig(p) for p in profiles),
                 key=lambda r: (-GEO.profile(str(r.mig_profile)).memory_slices, -GEO.profile(str(r.mig_profile)).compute))
    total = sum(mig_compute(p) for p in profiles)
    if mig_optimum(nodes, seq).slices == total:
        assert online_slices(nodes, seq) == total


def test_optimum_beats_an_unlucky_online_order() -> None:
    # online: two 3g arrive first and take both halves; the 4g that follows cannot start at 0.
    nodes = [mig_node("n", 1)]
    seq = [mig("3g.40gb"), mig("3g.40gb"), mig("4g.40gb")]
    assert online_slices(nodes, seq) == 6
    assert mig_optimum(nodes, seq).slices == 7


def test_optimum_respects_existing_instances_and_node_cpu() -> None:
    from placement.inventory import MigSlice
    nodes = [mig_node("n", 1, cores=2, slices={0: (MigSlice("4g.40gb", 0),)})]
    seq = [mig("3g.40gb", cores=2), mig("2g.20gb", cores=1), mig("1g.10gb", cores=1)]
    opt = mig_optimum(nodes, seq)
    assert opt.proven and opt.slices == 3  # the 3g fits at start 4 but takes all the CPU

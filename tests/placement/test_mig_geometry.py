"""MIG profile tables, legal starts and the slice planner's start choice."""

from __future__ import annotations

import pytest

from placement import Placement
from placement.mig import COMPUTE_SLICES, GEOMETRIES, MigState, geometry_for_model
from placement.mig_planner import SlicePlanner
from placement.placing import place

from .builders import cluster, mig, mig_node

# (profile suffix position, compute, memory slices, legal starts, max count) from
# gpu-sharing-formats.md §2
REFERENCE = {
    "A100-40GB": ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
    "A100-80GB": ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "H100-80GB": ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "H200": ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"],
}
SHAPES = [
    (1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
    (1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
    (1, 2, (0, 2, 4, 6), 4),
    (2, 2, (0, 2, 4), 3),
    (3, 4, (0, 4), 2),
    (4, 4, (0,), 1),
    (7, 8, (0,), 1),
]


@pytest.mark.parametrize("geometry", sorted(REFERENCE))
def test_profile_sizes_and_start_slots_match_the_reference_table(geometry: str) -> None:
    geo = GEOMETRIES[geometry]
    for name, (compute, size, starts, max_count) in zip(REFERENCE[geometry], SHAPES, strict=True):
        p = geo.profile(name)
        assert (p.compute, p.memory_slices, p.starts, p.max_count) == (compute, size, starts, max_count)


def _reachable(geometry: str) -> set[MigState]:
    geo = GEOMETRIES[geometry]
    seen = {MigState()}
    todo = [MigState()]
    while todo:
        st = todo.pop()
        for p in geo.profiles:
            for s in geo.legal_starts(st, p):
                nxt = geo.add(st, p, s)
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
    return seen


def test_every_reachable_layout_stays_within_seven_compute_slices_and_one_media_instance() -> None:
    states = _reachable("A100-80GB")
    assert len(states) > 50
    assert all(st.compute <= COMPUTE_SLICES and st.media <= 1 for st in states)
    # the full-memory layouts the reference names are reachable
    geo = GEOMETRIES["A100-80GB"]
    st = geo.add(geo.add(MigState(), geo.profile("4g.40gb"), 0), geo.profile("3g.40gb"), 4)
    assert st in states and st.compute == 7


def test_a_3g_at_start_zero_blocks_the_only_4g_start() -> None:
    geo = GEOMETRIES["H100-80GB"]
    st = geo.add(MigState(), geo.profile("3g.40gb"), 0)
    assert geo.legal_starts(st, geo.profile("4g.40gb")) == ()
    st4 = geo.add(MigState(), geo.profile("3g.40gb"), 4)
    assert geo.legal_starts(st4, geo.profile("4g.40gb")) == (0,)


def test_overlapping_or_misaligned_instances_are_illegal() -> None:
    geo = GEOMETRIES["A100-40GB"]
    st = geo.add(MigState(), geo.profile("2g.10gb"), 2)
    assert 2 not in geo.legal_starts(st, geo.profile("1g.5gb"))
    assert geo.legal_starts(MigState(), geo.profile("2g.10gb")) == (0, 2, 4)  # never at an odd slice
    with pytest.raises(ValueError):
        geo.add(st, geo.profile("1g.10gb"), 2)


def test_second_media_extension_instance_is_refused() -> None:
    geo = GEOMETRIES["A100-80GB"]
    st = geo.add(MigState(), geo.profile("1g.10gb+me"), 0)
    assert geo.legal_starts(st, geo.profile("1g.10gb+me")) == ()


def test_model_names_map_to_their_geometry() -> None:
    assert geometry_for_model("NVIDIA A100-SXM4-40GB") is GEOMETRIES["A100-40GB"]
    assert geometry_for_model("NVIDIA A100-SXM4-80GB") is GEOMETRIES["A100-80GB"]
    assert geometry_for_model("A100", memory_mib=81920) is GEOMETRIES["A100-80GB"]
    assert geometry_for_model("NVIDIA H100 80GB HBM3") is GEOMETRIES["H100-80GB"]
    assert geometry_for_model("NVIDIA H200") is GEOMETRIES["H200"]
    assert geometry_for_model("Tesla T4") is None


def test_planner_puts_a_3g_at_start_4_so_the_4g_start_stays_free() -> None:
    c = cluster(mig_node("n", 1))
    slots, starts = SlicePlanner().choose(c, mig("3g.40gb"), 0)
    assert (slots, starts) == ((0,), (4,))


def test_planner_puts_a_1g_at_the_last_slot_keeping_4g_and_3g_possible() -> None:
    c = cluster(mig_node("n", 1))
    _, starts = SlicePlanner().choose(c, mig("1g.10gb"), 0)
    assert starts == (6,)


def test_planner_prefers_the_fullest_gpu_that_still_fits() -> None:
    c = cluster(mig_node("n", 2))
    c.apply(Placement(mig("4g.40gb"), "n", (1,), (0,)))
    slots, starts = SlicePlanner().choose(c, mig("3g.40gb"), 0)
    assert (slots, starts) == ((1,), (4,))


def test_a_4g_and_a_3g_fill_a_gpu_whatever_the_arrival_order() -> None:
    for order in (["4g.40gb", "3g.40gb"], ["3g.40gb", "4g.40gb"]):
        c = cluster(mig_node("n", 1))
        for profile in order:
            d = place(c, mig(profile))
            assert isinstance(d, Placement), d
            c.apply(d)
        assert c.mig_compute_used() == 7

"""Each policy's rule (placement-benchmark.md §4, §6) on small hand-made clusters.

Ranks are set so that the node the rule must pick has the *worst* tie-break rank: the rule,
not the tie-break, has to be what picks it.
"""

from __future__ import annotations

import numpy as np
import pytest

from placement import Cluster, Placement, Request, Workload, make_policy
from placement.fragmentation import FragModel
from placement.placing import place
from placement.policies import BestFit, Clustering, DotProduct, FirstFit, Packing, RandomPolicy
from placement.policies.fgd import FGD, fgd_score
from placement.policies.ours import Ours, model_pressure

from .builders import cluster, cpu_only, node, shared, whole, workload


def placed_on(c: Cluster, request: Request, policy_name: str, wl: Workload | None = None) -> Placement:
    d = place(c, request, make_policy(policy_name, wl or workload(request)))
    assert isinstance(d, Placement), d
    return d


def test_firstfit_takes_the_lowest_ranked_feasible_node() -> None:
    c = cluster(node("tight", 8, 1), node("roomy", 64, 8), node("full", 8, 1, used=(1000,)), rank=[1, 2, 0])
    assert place(c, whole(1), FirstFit()).node == "tight"  # type: ignore[union-attr]
    assert place(c, whole(2), FirstFit()).node == "roomy"  # type: ignore[union-attr]


def test_random_only_picks_feasible_nodes_and_repeats_with_the_same_seed() -> None:
    c = cluster(node("a", 8, 1), node("b", 8, 2), node("c", 8, 4), node("d", 8, 1, used=(900,)))
    picks = [place(c, whole(2), RandomPolicy(seed=7)).node for _ in range(20)]  # type: ignore[union-attr]
    assert set(picks) <= {"b", "c"}
    assert picks == [place(c, whole(2), RandomPolicy(seed=7)).node for _ in range(20)]  # type: ignore[union-attr]


def test_dotproduct_prefers_the_smallest_dot_product_of_free_and_requested() -> None:
    c = cluster(node("small", 16, 2), node("big", 64, 8), rank=[1, 0])
    scores = DotProduct().scores(c, whole(1, cores=4), np.array([0, 1]))
    # dot(small) = (16/128)(4/128) + (2000/8000)(1000/8000); score = 100 (1 - dot/2)
    assert scores[0] == pytest.approx(100 * (1 - ((16 / 128) * (4 / 128) + (2 / 8) * (1 / 8)) / 2))
    assert place(c, whole(1, cores=4), DotProduct()).node == "small"  # type: ignore[union-attr]


def test_bestfit_prefers_the_node_tightest_on_cpu_and_gpu_after_placement() -> None:
    c = cluster(node("small", 16, 2), node("big", 64, 8), rank=[1, 0])
    scores = BestFit().scores(c, whole(1, cores=4), np.array([0, 1]))
    assert scores[0] == pytest.approx(100 * (1 - (0.5 * 12 / 128 + 0.5 * 1000 / 8000)))
    assert place(c, whole(1, cores=4), BestFit()).node == "small"  # type: ignore[union-attr]


def test_bestfit_gpu_inside_a_node_is_the_fitting_gpu_with_least_free_share() -> None:
    c = cluster(node("n", 32, 4, used=(100, 700, 500, 0)))
    d = place(c, shared(300), BestFit())
    assert isinstance(d, Placement) and d.gpu_indices == (1,)  # free: 900, 300, 500, 1000


def test_whole_gpu_pods_take_the_lowest_index_fully_free_gpus() -> None:
    c = cluster(node("n", 32, 4, used=(0, 300, 0, 0)))
    d = place(c, whole(2), FirstFit())
    assert isinstance(d, Placement) and d.gpu_indices == (0, 2)


def _clustering_cluster() -> Cluster:
    c = cluster(node("share-only", 64, 8), node("mixed", 64, 8), node("empty", 64, 8), node("other", 64, 8),
                rank=[3, 2, 1, 0])
    c.apply(Placement(shared(300), "share-only", (0,)))
    c.apply(Placement(shared(300), "mixed", (0,)))
    c.apply(Placement(whole(1), "mixed", (1,)))
    c.apply(Placement(whole(1), "other", (0,)))
    return c


def test_clustering_tiers_same_tag_only_then_mixed_then_empty_then_other_tags() -> None:
    c = _clustering_cluster()
    s = Clustering().scores(c, shared(200), np.arange(4))
    assert 75 < s[0] <= 100 and 50 < s[1] <= 75 and 25 <= s[2] <= 50 and 0 <= s[3] <= 25
    order = []
    for _ in range(4):
        d = place(c, shared(200), Clustering())
        assert isinstance(d, Placement)
        order.append(d.node)
        i = c.index[d.node]
        c.apply(Placement(cpu_only(c.cpu_free[i] / 1000), d.node))  # fill its CPU: out of the next round
    assert order == ["share-only", "mixed", "empty", "other"]


def test_clustering_scores_cpu_only_pods_zero_everywhere() -> None:
    c = _clustering_cluster()
    assert not Clustering().scores(c, cpu_only(1), np.arange(4)).any()


def test_packing_prefers_partial_gpus_then_used_nodes_then_the_smallest_empty_node() -> None:
    c = cluster(node("partial", 64, 2, used=(500,)), node("used", 64, 2, used=(1000,)), node("empty8", 64, 8),
                node("empty2", 64, 2), rank=[3, 2, 0, 1])
    s = Packing().scores(c, shared(300), np.arange(4))
    assert s[0] == pytest.approx(50 + 50 * (1 - 200 / 1000))
    assert 33 <= s[1] <= 50 and 0 <= s[2] < s[3] <= 33
    assert place(c, shared(300), Packing()).node == "partial"  # type: ignore[union-attr]
    c2 = cluster(node("used", 64, 2, used=(1000,)), node("empty8", 64, 8), node("empty2", 64, 2), rank=[2, 0, 1])
    assert place(c2, shared(300), Packing()).node == "used"  # type: ignore[union-attr]
    c3 = cluster(node("empty8", 64, 8), node("empty2", 64, 2), rank=[0, 1])
    assert place(c3, shared(300), Packing()).node == "empty2"  # type: ignore[union-attr]


def _fgd_case() -> tuple[Cluster, Workload]:
    # classes: a 500-milli share and a whole GPU, equally popular (p = 0.5 each)
    wl = workload(shared(500), whole(1))
    c = cluster(node("x", 16, 2, used=(600,)), node("y", 16, 2), rank=[1, 0])
    return c, wl


def test_node_fragmentation_matches_the_hand_computed_value() -> None:
    c, wl = _fgd_case()
    f = FragModel(c, wl).node_frag(np.array([0, 1]))
    # x: GPU1 hosts both classes, so only GPU0's 400 free milli is a fragment for each class
    assert f.tolist() == pytest.approx([400.0, 0.0])


def test_fragmentation_counts_everything_free_when_the_node_lacks_cpu_for_a_class() -> None:
    wl = workload(Request(8000, 1024, 1, 500))
    c = cluster(node("x", 16, 2, cpu_used=12))
    assert FragModel(c, wl).node_frag(np.array([0])).tolist() == pytest.approx([2000.0])


def test_fgd_picks_the_node_and_gpu_with_the_smallest_fragmentation_increase() -> None:
    c, wl = _fgd_case()
    d = place(c, shared(400), FGD(wl))
    # filling x's GPU0 removes its 400-milli fragment (dF = -400); y would gain 300
    assert isinstance(d, Placement) and (d.node, d.gpu_indices) == ("x", (0,))
    deltas = FGD(wl).deltas(c, shared(400))
    assert deltas.df.tolist() == pytest.approx([-400.0, 300.0])


def test_fgd_score_is_a_quantised_sigmoid_so_near_equal_nodes_tie() -> None:
    assert fgd_score(np.array([0.0, 10.0, -400.0, 300.0])).tolist() == [50.0, 49.0, 59.0, 42.0]


def test_ours_sends_a_cpu_only_pod_to_the_cpu_rich_node_instead_of_stranding_gpus() -> None:
    wl = workload(Request(12000, 16 * 1024, 1, 1000), cpu_only(16))
    c = cluster(node("balanced", 96, 8), node("cpu-rich", 104, 2), rank=[0, 1])
    assert place(c, cpu_only(16), FGD(wl)).node == "balanced"  # type: ignore[union-attr]
    assert place(c, cpu_only(16), Ours(wl)).node == "cpu-rich"  # type: ignore[union-attr]


def test_ours_keeps_flexible_pods_off_the_model_that_constrained_pods_need() -> None:
    wl = workload(*([shared(500, models=("T4",))] * 3), shared(500))
    c = cluster(node("t4", 32, 2, model="T4"), node("g2", 32, 2, model="G2"), rank=[0, 1])
    pressure = model_pressure(wl, c)
    assert pressure[c.model_id["T4"]] > 0 and pressure[c.model_id["G2"]] == 0
    assert place(c, shared(500), Ours(wl)).node == "g2"  # type: ignore[union-attr]
    assert place(c, shared(500, models=("T4",)), Ours(wl)).node == "t4"  # type: ignore[union-attr]

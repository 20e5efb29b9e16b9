"""The spread policy: each unit goes to the node, then the GPU, with the most free capacity,
where the default (binpack) policy stacks units together; ties go the same way every time."""

from __future__ import annotations

from placement import Cluster, Placement, Policy, Request, default_policy, make_policy, place
from placement.policies import Spread
from tests.placement.builders import mig, node, shared, whole


def place_all(cluster: Cluster, requests: list[Request], policy: Policy) -> list[Placement]:
    out = []
    for request in requests:
        decision = place(cluster, request, policy)
        assert isinstance(decision, Placement), decision
        out.append(cluster.apply(decision))
    return out


def two_empty_nodes() -> Cluster:
    return Cluster([node("n0", 64, 4), node("n1", 64, 4)])


def test_spread_puts_two_whole_gpu_units_on_two_nodes_where_binpack_stacks_them() -> None:
    spread = place_all(two_empty_nodes(), [whole(1), whole(1)], Spread())
    packed = place_all(two_empty_nodes(), [whole(1), whole(1)], default_policy())
    assert [p.node for p in spread] == ["n0", "n1"]
    assert [p.node for p in packed] == ["n0", "n0"]


def test_spread_puts_shares_on_the_emptiest_node_then_the_emptiest_gpu() -> None:
    cluster = Cluster([node("busy", 64, 2, used=(500, 0)), node("quiet", 64, 2, used=(250, 0))])
    first, second, third = place_all(cluster, [shared(300), shared(300), shared(300)], Spread())
    # Free milli: quiet 750 + 1000, busy 500 + 1000. Quiet's empty GPU first (quiet: 1450 left),
    # then busy's empty GPU (1500 > 1450; busy: 1200 left), then quiet's GPU 0 (750 free > 700).
    assert (first.node, first.gpu_indices) == ("quiet", (1,))
    assert (second.node, second.gpu_indices) == ("busy", (1,))
    assert (third.node, third.gpu_indices) == ("quiet", (0,))


def test_binpack_stacks_shares_on_one_gpu_where_spread_keeps_them_apart() -> None:
    packed = place_all(Cluster([node("n0", 64, 2)]), [shared(250), shared(250)], default_policy())
    spread = place_all(Cluster([node("n0", 64, 2)]), [shared(250), shared(250)], Spread())
    assert [p.gpu_indices for p in packed] == [(0,), (0,)]
    assert [p.gpu_indices for p in spread] == [(0,), (1,)]


def test_equal_nodes_go_to_the_lowest_rank_every_time() -> None:
    for _ in range(3):
        cluster = Cluster([node("a", 64, 2), node("b", 64, 2), node("c", 64, 2)], rank=[2, 0, 1])
        assert place_all(cluster, [whole(1)], Spread())[0].node == "b"


def test_spread_counts_only_gpus_of_the_models_asked_for() -> None:
    cluster = Cluster([node("mixed", 64, 4, model="L4"), node("h", 64, 1, model="H100")])
    cluster_gpus = Cluster([node("x", 64, 1, model="H100"), node("y", 64, 2, model="H100")])
    assert place_all(cluster, [whole(1, models=("H100",))], Spread())[0].node == "h"
    assert place_all(cluster_gpus, [whole(1, models=("H100",))], Spread())[0].node == "y"


def test_spread_places_mig_instances_and_is_known_by_name() -> None:
    from tests.placement.builders import mig_node

    cluster = Cluster([mig_node("m0", 1), mig_node("m1", 1)])
    placed = place_all(cluster, [mig("1g.10gb"), mig("1g.10gb")], make_policy("spread"))
    assert [p.node for p in placed] == ["m0", "m1"] and all(p.policy == "spread" for p in placed)

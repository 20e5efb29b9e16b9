"""The ledger says exactly what the posted reports said: who held which GPU from which report to
which, with the grant; gaps (a lost report, an agent restart, a node reboot, an unreadable
PodResources) are recorded as gaps and never bridged."""

from __future__ import annotations

from custody.models import CustodyEvent, CustodyHolding
from tests.conftest import World
from tests.custody.scene import Agent, at, h100_grant, intervals, pod_device


def test_pod_a_then_pod_b_on_one_gpu_gives_two_intervals_with_their_grant(world: World, node_agent: Agent) -> None:
    allocation = h100_grant(world)
    gpu = node_agent.gpu(allocation.reservations.get().gpu_indices[0])
    node_agent.report([])
    node_agent.report([pod_device("vision-seg", "train-a", gpu)])  # 2
    node_agent.report([pod_device("vision-seg", "train-a", gpu)])  # 3
    node_agent.report([])  # 4: A is gone
    node_agent.report([pod_device("vision-seg", "train-b", gpu)])  # 5
    node_agent.report([])  # 6: B is gone

    first, second = intervals(gpu_uuid=gpu)
    assert (first.pod, first.started_at, first.ended_at, first.gone_at) == (
        "train-a", at(node_agent, 2), at(node_agent, 3), at(node_agent, 4))
    assert (second.pod, second.started_at, second.ended_at, second.gone_at) == (
        "train-b", at(node_agent, 5), at(node_agent, 5), at(node_agent, 6))
    for interval in (first, second):
        assert interval.allocation_id == allocation.pk and interval.attribution == "granted"
        assert (interval.start_observed, interval.end_observed, interval.confidence) == ("appeared", "gone", "high")
        assert interval.department_id == world.vision.pk and interval.pod_uid == f"uid-{interval.pod}"
    assert not CustodyHolding.objects.exists()
    assert not CustodyEvent.objects.filter(kind="gap").exists()


def test_a_lost_report_closes_the_interval_at_its_last_sighting_and_records_a_gap(world: World, node_agent: Agent) -> None:
    allocation = h100_grant(world)
    gpu = node_agent.gpu(allocation.reservations.get().gpu_indices[0])
    held = [pod_device("vision-seg", "train-a", gpu)]
    node_agent.report([])
    node_agent.report(held)  # 2
    node_agent.report(held, skip=1)  # 4: report 3 never arrived
    node_agent.report([])  # 5

    before, after = intervals(gpu_uuid=gpu)
    assert (before.started_at, before.ended_at, before.end_observed) == (at(node_agent, 2), at(node_agent, 2), "gap")
    assert before.gone_at is None and before.confidence == "medium"
    assert (after.started_at, after.start_observed, after.end_observed) == (at(node_agent, 3), "after_gap", "gone")
    gap = CustodyEvent.objects.get(kind="gap")
    assert (gap.started_at, gap.ended_at, gap.gap_cause) == (at(node_agent, 2), at(node_agent, 3), "lost_report")
    assert gap.pod == "" and gap.allocation_id is None  # a gap attributes nothing


def test_an_agent_restart_and_a_node_reboot_leave_gaps(world: World, node_agent: Agent) -> None:
    allocation = h100_grant(world)
    gpu = node_agent.gpu(allocation.reservations.get().gpu_indices[0])
    held = [pod_device("vision-seg", "train-a", gpu)]
    node_agent.report(held)  # 1
    node_agent.restart(downtime=5)
    node_agent.report(held)  # 2: same pod, a new agent: not the same interval
    node_agent.restart(downtime=600)  # the node rebooted: ten minutes without an agent
    node_agent.report([])  # 3

    causes = list(CustodyEvent.objects.filter(kind="gap").order_by("chain_seq").values_list("gap_cause", "started_at", "ended_at"))
    assert causes == [("agent_restart", at(node_agent, 1), at(node_agent, 2)),
                      ("agent_restart", at(node_agent, 2), at(node_agent, 3))]  # fmt: skip
    first, second = intervals(gpu_uuid=gpu)
    assert (first.started_at, first.ended_at, first.end_observed) == (at(node_agent, 1), at(node_agent, 1), "gap")
    assert (second.started_at, second.ended_at, second.end_observed) == (at(node_agent, 2), at(node_agent, 2), "gap")
    assert {first.confidence, second.confidence} == {"low"}  # neither end bounded by an adjacent report


def test_pod_resources_error_is_a_gap_not_a_continuation(world: World, node_agent: Agent) -> None:
    allocation = h100_grant(world)
    gpu = node_agent.gpu(allocation.reservations.get().gpu_indices[0])
    held = [pod_device("vision-seg", "train-a", gpu)]
    node_agent.report(held)  # 1
    node_agent.report(None, error="kubelet socket: connection refused")  # 2
    node_agent.report(None, error="kubelet socket: connection refused")  # 3
    node_agent.report(held)  # 4

    gap = CustodyEvent.objects.get(kind="gap")
    assert (gap.started_at, gap.ended_at, gap.gap_cause) == (at(node_agent, 1), at(node_agent, 4), "pod_resources_error")
    (closed,) = intervals(gpu_uuid=gpu)
    assert (closed.ended_at, closed.end_observed) == (at(node_agent, 1), "gap")
    holding = CustodyHolding.objects.get()
    assert (holding.started_at, holding.start_observed) == (at(node_agent, 4), "after_gap")


def test_the_chain_links_every_row_of_a_node(world: World, node_agent: Agent) -> None:
    from custody.chain import GENESIS, row_hash

    node_agent.report([pod_device("vision-seg", "x", node_agent.gpu(0))])
    node_agent.report([])
    rows = list(CustodyEvent.objects.order_by("chain_seq").values())
    assert [row["chain_seq"] for row in rows] == [1, 2]
    assert rows[0]["prev_hash"] == GENESIS and rows[1]["prev_hash"] == rows[0]["hash"]
    assert all(row_hash(row) == row["hash"] for row in rows)

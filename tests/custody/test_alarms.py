"""Mismatch alarms within one report: each an audit event, a /metrics series while it holds, and
cleared (audited) when it no longer does."""

from __future__ import annotations

import datetime

from audit.models import AuditEvent
from clusters.models import Node
from custody.models import CustodyAlarm, CustodyEvent, CustodyHolding
from kernel.clock import clock_now, clock_set
from observability.collectors import custody_families
from telemetry.staleness import nodes_mark_stale
from tests.conftest import World
from tests.custody.scene import Agent, at, h100_grant, pod_device


def _alarm_series() -> dict[tuple[str, str, str], float]:
    alarms = next(family for family in custody_families() if family.name == "gpuportal_custody_alarms")
    return {(s.labels["cluster"], s.labels["node"], s.labels["kind"]): s.value for s in alarms.samples}


def test_a_pod_on_a_gpu_it_was_not_granted_raises_the_alarm(world: World, node_agent: Agent) -> None:
    vision_grant = h100_grant(world)  # vision-seg's GPU
    booked = node_agent.gpu(vision_grant.reservations.get().gpu_indices[0])
    free = next(node_agent.gpu(i) for i in range(8) if node_agent.gpu(i) != booked)
    node_agent.report([])
    node_agent.report([pod_device("nlp-llm", "intruder", booked), pod_device("nlp-llm", "squatter", free)])

    raised = {event.after["alarm"]: event for event in AuditEvent.objects.filter(action="custody.alarm_raised")}
    assert set(raised) == {"foreign_project", "ungranted", "grant_unused"}
    assert raised["foreign_project"].details["pod"] == "intruder"
    assert raised["foreign_project"].details["booked_to_allocations"] == [vision_grant.pk]
    assert raised["ungranted"].details["device_id"] == free
    assert raised["grant_unused"].details["allocation_id"] == vision_grant.pk
    assert _alarm_series() == {("test-cluster", "h100-0", "foreign_project"): 1.0,
                               ("test-cluster", "h100-0", "ungranted"): 1.0,
                               ("test-cluster", "h100-0", "grant_unused"): 1.0}  # fmt: skip
    intruder = CustodyHolding.objects.get(pod="intruder")
    assert (intruder.attribution, intruder.allocation_id) == ("foreign_project", None)  # never the other's grant

    node_agent.report([pod_device("vision-seg", "owner", booked)])  # the intruders left, the owner came
    cleared = {event.before["alarm"] for event in AuditEvent.objects.filter(action="custody.alarm_cleared")}
    assert cleared == {"foreign_project", "ungranted", "grant_unused"}
    assert not CustodyAlarm.objects.exists() and _alarm_series() == {}


def test_a_node_whose_reports_stopped_raises_the_alarm_and_leaves_a_gap(world: World, node_agent: Agent) -> None:
    allocation = h100_grant(world)
    gpu = node_agent.gpu(allocation.reservations.get().gpu_indices[0])
    node_agent.report([pod_device("vision-seg", "train-a", gpu)])  # 1
    clock_set(clock_now() + datetime.timedelta(minutes=10))  # the portal received it now
    assert nodes_mark_stale() == 1

    node = Node.objects.get(name="h100-0", cluster=world.cluster)
    (closed,) = CustodyEvent.objects.filter(kind="closed")
    assert (closed.ended_at, closed.end_observed) == (at(node_agent, 1), "gap")
    assert CustodyAlarm.objects.get().kind == "reports_stopped" and CustodyAlarm.objects.get().node == node
    node_agent.at += datetime.timedelta(minutes=10)
    node_agent.report([pod_device("vision-seg", "train-a", gpu)])  # 2, ten minutes later
    gap = CustodyEvent.objects.get(kind="gap")
    assert (gap.started_at, gap.ended_at, gap.gap_cause) == (at(node_agent, 1), at(node_agent, 2), "reports_stopped")
    assert not CustodyAlarm.objects.exists()

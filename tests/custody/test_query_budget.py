"""The custody answer reads a fixed number of queries, however many intervals, open holdings and
gaps it returns (the foundation's budgets grow other lists; this one grows with reports)."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.conftest import World
from tests.custody.scene import Agent, pod_device


def _queries(world: World, device: str) -> int:
    client = world.client("auditor")
    with CaptureQueriesContext(connection) as captured:
        response = client.get("/api/v1/custody/", {"device": device})
    assert response.status_code == 200
    return len(captured.captured_queries)


def test_the_answer_costs_the_same_for_two_intervals_as_for_twelve(world: World, node_agent: Agent) -> None:
    gpu = node_agent.gpu(0)
    node_agent.report([pod_device("vision-seg", "a", gpu)])
    node_agent.report([pod_device("vision-seg", "b", gpu)])
    _queries(world, gpu)  # the first request fills the caches every request shares
    small = _queries(world, gpu)
    for index in range(10):
        node_agent.report([pod_device("vision-seg", f"pod-{index}", gpu)], skip=index % 2)  # with gaps
    large = world.client("auditor").get("/api/v1/custody/", {"device": gpu}).json()["count"]
    assert large > 12
    assert _queries(world, gpu) == small

"""How a report reaches the database (``telemetry.ingest.sql``): a steady report makes the same few
round trips whatever the number of its GPUs, writes only what changed, and what it stores reads
back as the ORM would have stored it."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from telemetry.models import GpuSample, NodeReportState, ObservedGpu, SampleTier
from tests.conftest import World, requires_postgres
from tests.telemetry.fixtures import add_node, agent, issue_token, make_report, post_report  # noqa: F401 (fixtures)
from tests.telemetry.test_report_endpoint import IssueToken

H200 = "NVIDIA-H200"
POSTGRES: pytest.MarkDecorator = requires_postgres()


def _statements(client: APIClient, node: str, report: dict[str, Any], token: str) -> list[str]:
    """The SQL a report sent, savepoints left out (the test's own transaction makes them)."""
    with CaptureQueriesContext(connection) as captured:
        assert post_report(client, node, report, token).json()["accepted"]
    return [query["sql"] for query in captured.captured_queries if "SAVEPOINT" not in query["sql"]]


def _steady(client: APIClient, node: str, recording: str, token: str) -> list[str]:
    for sequence in (1, 2):  # the first fills the inventory; the second finds it as it is
        assert post_report(client, node, make_report(recording, node_name=node, sequence=sequence), token).json()["accepted"]
    return _statements(client, node, make_report(recording, node_name=node, sequence=3), token)


@POSTGRES
def test_a_steady_report_makes_four_round_trips_for_one_gpu_or_for_eight(
    world: World, issue_token: IssueToken, agent: APIClient  # noqa: F811 (fixtures)
) -> None:
    """The token, the locked report state, the GPUs, and one batch of writes (on PostgreSQL)."""
    add_node(world.cluster, "gpu-h100-01")
    add_node(world.cluster, "gpu-h200-01", gpus=8, model=H200, memory_mib=143771)
    _, one_token = issue_token("gpu-h100-01")
    _, eight_token = issue_token("gpu-h200-01")

    one = _steady(agent, "gpu-h100-01", "h100-80gb-no-mig", one_token)
    eight = _steady(agent, "gpu-h200-01", "h200-8gpu-node", eight_token)

    assert len(one) == len(eight) == 4, eight
    batch = eight[-1]
    assert batch.count("UPDATE") == 2 and batch.count("INSERT") == 1, batch  # GPUs, state; samples
    assert GpuSample.objects.filter(gpu__node__name="gpu-h200-01", tier=SampleTier.RAW).count() == 24


@POSTGRES
def test_readings_that_stayed_the_same_are_left_out_of_the_update(
    world: World, issue_token: IssueToken, agent: APIClient  # noqa: F811 (fixtures)
) -> None:
    node = add_node(world.cluster, "gpu-h200-01", gpus=8, model=H200, memory_mib=143771).name
    _, token = issue_token(node)
    batch = _steady(agent, node, "h200-8gpu-node", token)[-1]
    assert '"processes"' not in batch  # the same processes as before on every GPU

    changed = make_report("h200-8gpu-node", node_name=node, sequence=4)
    changed["gpus"][6]["processes"] = []
    batch = _statements(agent, node, changed, token)[-1]

    assert '"processes"' in batch
    stored = dict(ObservedGpu.objects.filter(node__name=node).values_list("index", "processes"))
    assert stored[6] == [] and stored[7] == changed["gpus"][7]["processes"] != []


@pytest.mark.parametrize("recording", ["h200-8gpu-node", "a100-80gb-mig", "faulty-gpus-node"])
def test_what_a_report_stores_reads_back_as_the_report_said(
    world: World, issue_token: IssueToken, agent: APIClient, recording: str  # noqa: F811 (fixtures)
) -> None:
    """On SQLite and PostgreSQL: raw reads and batched writes keep every value's type (datetimes,
    JSON, nulls) as the ORM would, over a first report and two steady ones."""
    report = make_report(recording, node_name="gpu-node-1")
    add_node(world.cluster, "gpu-node-1", gpus=len(report["gpus"]))
    _, token = issue_token("gpu-node-1")
    for sequence in (1, 2, 3):
        report = make_report(recording, node_name="gpu-node-1", sequence=sequence)
        for gpu in report["gpus"]:
            if gpu.get("memory_used_bytes") is not None:
                gpu["memory_used_bytes"] += sequence
        assert post_report(agent, "gpu-node-1", report, token).json()["accepted"]

    state = NodeReportState.objects.get(node__name="gpu-node-1")
    assert state.sequence == 3 and state.reports_accepted == 3
    assert state.collected_at is not None and state.collected_at.isoformat().replace("+00:00", "Z").startswith(report["collected_at"][:19])
    for gpu in report["gpus"]:
        if gpu.get("uuid") is None:
            continue
        row = ObservedGpu.objects.get(node__name="gpu-node-1", uuid=gpu["uuid"])
        assert row.memory_used_bytes == gpu.get("memory_used_bytes")
        assert row.processes == gpu.get("processes", row.processes)
        assert row.is_present and row.last_seen_at is not None

"""The node agent's driver and CUDA versions reach the inventory node (``clusters.Node``), where
flavors' minimums are checked: written when they change, kept when a report could not read them."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from allocations.grants import services
from allocations.models import Flavor
from clusters.models import Node
from kernel.errors import CapacityExceeded
from telemetry.models import NodeReportState
from tests.conftest import World
from tests.telemetry.fixtures import add_node, agent, issue_token, make_report, post_report  # noqa: F401 (fixtures)
from tests.telemetry.test_report_endpoint import IssueToken

NODE = "gpu-a100-07"
RECORDING = "a100-80gb-mig"  # NVML says driver 550.90.07, CUDA 12040 (12.4)


def _send(client: APIClient, token: str, sequence: int, **header: Any) -> list[str]:
    report = make_report(RECORDING, node_name=NODE, sequence=sequence)
    report.update(header)
    with CaptureQueriesContext(connection) as captured:
        response = post_report(client, NODE, report, token)
    assert response.status_code == 200 and response.json()["accepted"], response.content
    return [query["sql"] for query in captured.captured_queries]


def _node_updates(statements: list[str]) -> int:
    """How many UPDATEs of the node table the statements hold (PostgreSQL sends a batch as one)."""
    return sum(sql.count(f'UPDATE "{Node._meta.db_table}"') for sql in statements)


def _versions() -> tuple[str, str]:
    return tuple(Node.objects.filter(name=NODE).values_list("driver_version", "cuda_version").get())  # type: ignore[return-value]


def test_the_report_writes_the_nodes_versions_only_when_they_change(
    world: World, issue_token: IssueToken, agent: APIClient  # noqa: F811 (fixtures)
) -> None:
    add_node(world.cluster, NODE)
    _, token = issue_token(NODE)
    assert _versions() == ("", "")

    first = _send(agent, token, 1)
    assert _versions() == ("550.90.07", "12.4")
    assert _node_updates(first) >= 1
    steady = _send(agent, token, 2)
    assert _node_updates(steady) == 0, steady  # the same versions: the node row is not written

    upgraded = _send(agent, token, 3, driver_version="570.124.06", cuda_driver_version="12.8")
    assert _versions() == ("570.124.06", "12.8")
    assert _node_updates(upgraded) == 1, upgraded

    # NVML could not read the versions this time: the node keeps the last ones known, while the
    # report state says what this report said.
    _send(agent, token, 4, driver_version=None, cuda_driver_version=None)
    assert _versions() == ("570.124.06", "12.8")
    state = NodeReportState.objects.get(node__name=NODE)
    assert (state.driver_version, state.cuda_driver_version) == ("", "")


def test_a_flavor_with_minimums_is_booked_on_a_node_once_its_agent_reports_them(
    world: World, issue_token: IssueToken, agent: APIClient  # noqa: F811 (fixtures)
) -> None:
    add_node(world.cluster, NODE)
    Node.objects.filter(name__startswith="a100-").update(is_schedulable=False)
    Flavor.objects.filter(pk=world.a100.pk).update(min_cuda_version="12.4", min_driver_version="550")
    world.a100.refresh_from_db()
    start = timezone.now()
    allocation = services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=1,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="x",
    )
    with pytest.raises(CapacityExceeded) as refusal:
        services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    assert f"{NODE}: driver unknown, CUDA unknown" in refusal.value.message

    _, token = issue_token(NODE)
    _send(agent, token, 1)
    booked = services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    assert [row.node.name for row in booked.reservations.select_related("node")] == [NODE]

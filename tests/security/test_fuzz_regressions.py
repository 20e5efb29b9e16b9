"""Regression tests for the 5xx answers ``make test``'s API fuzz step (``tests/fuzz/run.py``) found:
each replays the request that failed, in the form the fuzzer sent it, and checks the 4xx it gets now."""

from __future__ import annotations

from rest_framework.test import APIClient

from telemetry.models import NodeReportState, ObservedMigInstance
from tests.conftest import World
from tests.telemetry.fixtures import add_node, agent, issue_token, make_report, post_report  # noqa: F401 (fixtures)
from tests.telemetry.test_report_endpoint import IssueToken

NODE = "gpu-a100-07"


def test_a_report_naming_one_mig_slot_twice_on_a_gpu_is_a_400_naming_it(
    world: World, issue_token: IssueToken, agent: APIClient  # noqa: F811 (fixtures)
) -> None:
    """Was a 500: the second MIG device of the slot broke the (gpu, slot) unique constraint on insert."""
    add_node(world.cluster, NODE)
    _, token = issue_token(NODE)
    report = make_report("a100-80gb-mig", node_name=NODE)
    devices = report["gpus"][0]["mig_instances"]
    assert len(devices) >= 2
    devices[1]["index"] = devices[0]["index"]

    response = post_report(agent, NODE, report, token)

    assert response.status_code == 400, response.content
    assert "/gpus/0/mig_instances/1/index" in response.json()["error"]["fields"]
    assert not ObservedMigInstance.objects.exists() and not NodeReportState.objects.filter(sequence=1).exists()

    devices[1]["index"] = max(device["index"] for device in devices) + 1
    assert post_report(agent, NODE, report, token).status_code == 200


def test_a_report_with_a_nul_byte_in_a_string_is_a_400_and_stores_nothing(
    world: World, issue_token: IssueToken, agent: APIClient  # noqa: F811 (fixtures)
) -> None:
    """Was a 500 on PostgreSQL (a DataError storing the NUL in text or jsonb); on SQLite it was stored."""
    add_node(world.cluster, NODE)
    _, token = issue_token(NODE)
    report = make_report("a100-80gb-mig", node_name=NODE)
    report["gpus"][0]["name"] = "NVIDIA A100\u0000"

    response = post_report(agent, NODE, report, token)

    assert response.status_code == 400, response.content
    assert "gpus" in response.json()["error"]["fields"]
    assert not NodeReportState.objects.filter(sequence=1).exists()

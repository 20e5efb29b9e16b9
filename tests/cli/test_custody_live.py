"""gpuportal custody, over REST against a live portal: the table, the JSON, a bundle that verifies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from clusters.models import Gpu, Node
from custody.verify import bundle_verify
from telemetry.node_tokens import node_token_issue
from tests.cli.conftest import Cli, Portal
from tests.custody.scene import NODE, Agent, h100_grant, pod_device
from tests.custody.test_api import ledger_emptied  # noqa: F401 (fixture)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("ledger_emptied")]


def _history(portal: Portal) -> tuple[str, int]:
    world = portal.world
    _, token = node_token_issue(actor=world.users["platform"], cluster_id=world.cluster.pk, node_name=NODE)
    reporter = Agent(client=APIClient(), token=token)
    node = Node.objects.get(cluster=world.cluster, name=NODE)
    for index in range(8):
        Gpu.objects.filter(node=node, index=index).update(uuid=reporter.gpu(index))
    allocation = h100_grant(world)
    gpu = reporter.gpu(allocation.reservations.get().gpu_indices[0])
    reporter.report([pod_device("vision-seg", "train-a", gpu)])
    reporter.report([])
    return gpu, allocation.pk


def test_the_auditor_asks_who_held_a_gpu_and_downloads_a_bundle(portal: Portal, cli: Cli, tmp_path: Path) -> None:
    gpu, allocation = _history(portal)
    cli.login(portal, "auditor")
    listed = cli("custody", "--device", gpu)
    assert listed.exit_code == 0, listed.stderr
    assert "vision-seg/train-a/main" in listed.stdout and str(allocation) in listed.stdout
    as_json = json.loads(cli("custody", "--allocation", str(allocation), "-o", "json").stdout)
    assert [row["pod"] for row in as_json["results"]] == ["train-a"]
    bundle = tmp_path / "custody.jsonl"
    saved = cli("custody", "--device", gpu, "--format", "bundle", "-f", str(bundle))
    assert saved.exit_code == 0, saved.stderr
    assert bundle_verify(bundle.read_text().splitlines()).startswith("OK custody bundle: 1 answer row")


def test_a_researcher_is_told_nothing(portal: Portal, cli: Cli) -> None:
    cli.login(portal, "nlp_member")
    result = cli("custody", "--device", "GPU-anything")
    assert result.exit_code != 0, result.stdout

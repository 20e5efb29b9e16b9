"""``gpuportal why`` against a live portal prints what GET allocations/{id}/why/ answers: the
parent's quota numbers, what would start now and an estimated start."""

from __future__ import annotations

import datetime
import json

import pytest
from django.utils import timezone

from tests.cli.conftest import Cli, Portal
from tests.why.test_reasons import _vision_holds_ten

pytestmark = pytest.mark.django_db(transaction=True)


def test_why_prints_the_parents_numbers_what_would_start_now_and_when(portal: Portal, cli: Cli) -> None:
    _vision_holds_ten(portal.world)
    response = portal.api("nlp_member", "POST", "allocations/", json={
        "project": portal.world.llm.pk, "flavor": portal.world.a100.pk, "quantity": 7,
        "justification": "tests", **portal.world.window(days=1),
    })
    assert response.status_code == 201, response.text
    allocation = response.json()["id"]
    cli.login(portal, "nlp_member")
    result = cli("why", str(allocation))
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    assert f"Allocation {allocation} (pending): quota" in text
    assert "acme: GPU-equivalents: asked 7, held 10, limit 16, effective limit 16 (now 16, held now 10): EXCEEDED" in text
    assert "fewer-units: 6 × a100" in text and "later-start: 7 × a100 from " in text
    assert "Estimated start: 20" in text and "vision: 10 GPU-equivalents in 2 grants" in text
    as_json = json.loads(cli("why", str(allocation), "-o", "json").stdout)
    assert as_json["reason"]["facts"]["department"] == "acme"
    assert cli("why", "999999").exit_code != 0


def test_why_prints_the_pods_of_an_allocation_on_its_cluster(portal: Portal, cli: Cli) -> None:
    """An approved allocation is not waiting (why/ answers 409): the command says what its cluster's
    pods are instead; the test cluster is a manifests folder, whose pods are not readable."""
    response = portal.api("nlp_member", "POST", "allocations/", json={
        "project": portal.world.llm.pk, "flavor": portal.world.a100.pk, "quantity": 1,
        "justification": "tests", "starts_at": timezone.now().isoformat(),
        "ends_at": (timezone.now() + datetime.timedelta(days=1)).isoformat(),
    })
    allocation = response.json()["id"]
    assert portal.api("nlp_admin", "POST", f"allocations/{allocation}/approve/", json={}).status_code == 200
    cli.login(portal, "nlp_member")
    result = cli("why", str(allocation))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("Pods on the cluster: not-readable: ") and "not readable on this driver" in result.stdout
    assert json.loads(cli("why", str(allocation), "-o", "json").stdout)["pods"]["status"] == "not-readable"

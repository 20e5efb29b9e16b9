"""``GET /api/v1/audit/checkpoints/consistency/``: the subtrees covering the events between two
tree sizes, which extend the older checkpoint's tree to the newer one's signed root (what
``gpuportal audit verify`` checks for a bundle older than the latest checkpoint)."""

from __future__ import annotations

import pytest
from django.urls import include, path

from audit.integrity.merkle import reference_root
from audit.models import AuditCheckpoint, AuditEvent
from cli.auditcheck import _Tree
from tests.audit.conftest import record
from tests.conftest import World

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.audit.test_consistency_api")]

urlpatterns = [path("api/v1/audit/", include("compliance.urls"))]

BASE = "/api/v1/audit/checkpoints"


def test_the_proof_extends_an_older_checkpoints_tree_to_the_latest_signed_root(world: World) -> None:
    record(world.nlp.pk)
    auditor = world.client("auditor")
    older = auditor.post(f"{BASE}/").json()
    for _ in range(5):
        record(world.vision.pk)
    newer = auditor.post(f"{BASE}/").json()
    assert newer["size"] > older["size"]
    answer = world.client("nlp_admin").get(f"{BASE}/consistency/", {"first": older["size"], "second": newer["size"]})
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["first"], body["second"]) == (older["size"], newer["size"])
    hashes = [bytes.fromhex(h) for h in AuditEvent.objects.order_by("seq").values_list("hash", flat=True)]
    tree = _Tree()
    for leaf in hashes[:older["size"]]:
        tree.append(0, leaf)
    for start, level, hash_ in body["nodes"]:
        assert start == tree.size
        tree.append(level, bytes.fromhex(hash_))
    assert tree.size == newer["size"]
    assert tree.root() == reference_root(hashes[:newer["size"]]) == bytes.fromhex(
        AuditCheckpoint.objects.get(number=newer["number"]).root)
    whole = auditor.get(f"{BASE}/consistency/").json()
    assert (whole["first"], whole["second"]) == (0, newer["size"])


def test_sizes_beyond_the_latest_checkpoint_or_out_of_order_are_400s_naming_the_field(world: World) -> None:
    record(world.nlp.pk)
    auditor = world.client("auditor")
    size = auditor.post(f"{BASE}/").json()["size"]
    beyond = auditor.get(f"{BASE}/consistency/", {"first": 0, "second": size + 1})
    assert beyond.status_code == 400 and "second" in beyond.content.decode()
    reversed_ = auditor.get(f"{BASE}/consistency/", {"first": size, "second": 1})
    assert reversed_.status_code == 400 and "first" in reversed_.content.decode()
    assert world.client("nobody").get(f"{BASE}/consistency/").status_code == 404

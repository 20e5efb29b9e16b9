"""GET /api/v1/custody/: the answers, their scope per persona, the downloads, and a bundle that
verifies offline while a tampered one (or one of a tampered ledger) does not."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator

import pytest
from django.db import connection

from audit.models import AuditEvent
from custody.chain import time_text
from custody.schema import statements_for
from custody.verify import BundleDefect, bundle_verify
from tests.conftest import World, requires_postgres
from tests.custody.scene import Agent, at, h100_grant, pod_device


@pytest.fixture
def history(world: World, node_agent: Agent) -> dict[str, str]:
    """Pod A of vision-seg held its granted GPU for two reports, then pod B; nlp-llm's pod used
    another GPU with no grant."""
    allocation = h100_grant(world)
    gpu = node_agent.gpu(allocation.reservations.get().gpu_indices[0])
    other = next(node_agent.gpu(i) for i in range(8) if node_agent.gpu(i) != gpu)
    node_agent.report([])
    node_agent.report([pod_device("vision-seg", "train-a", gpu), pod_device("nlp-llm", "sneaky", other)])
    node_agent.report([pod_device("vision-seg", "train-a", gpu)])
    node_agent.report([pod_device("vision-seg", "train-b", gpu)])
    return {"gpu": gpu, "other": other, "allocation": str(allocation.pk)}


def _get(world: World, persona: str, **params: str) -> object:
    return world.client(persona).get("/api/v1/custody/", params)


def test_the_auditor_asks_who_held_the_gpu_and_gets_both_pods_with_the_grant(world: World, node_agent: Agent,
                                                                             history: dict[str, str]) -> None:  # fmt: skip
    response = world.client("auditor").get("/api/v1/custody/", {"device": history["gpu"]})
    assert response.status_code == 200, response.json()
    results = response.json()["results"]
    assert [(row["pod"], row["state"]) for row in results] == [("train-a", "closed"), ("train-b", "open")]
    assert results[0]["started_at"] == time_text(at(node_agent, 2))
    assert {row["allocation_id"] for row in results} == {int(history["allocation"])}
    by_pod = world.client("auditor").get("/api/v1/custody/", {"pod": "nlp-llm/sneaky"}).json()["results"]
    assert [(row["device_id"], row["attribution"], row["allocation_id"]) for row in by_pod] == [
        (history["other"], "ungranted", None)]


def test_scope_per_persona(world: World, history: dict[str, str]) -> None:
    for persona in ("auditor", "platform"):
        assert len(world.client(persona).get("/api/v1/custody/", {"device": history["gpu"]}).json()["results"]) == 2
    # vision's admin sees vision's pods; NLP's admin sees nlp-llm's pod but not vision's
    assert len(world.client("vision_admin").get("/api/v1/custody/", {"device": history["gpu"]}).json()["results"]) == 2
    assert world.client("nlp_admin").get("/api/v1/custody/", {"device": history["gpu"]}).json()["results"] == []
    assert world.client("nlp_admin").get("/api/v1/custody/", {"allocation": history["allocation"]}).status_code == 404
    for persona in ("vision_member", "nlp_member", "nobody"):
        assert world.client(persona).get("/api/v1/custody/", {"device": history["gpu"]}).status_code == 404
    assert world.client(None).get("/api/v1/custody/", {"device": history["gpu"]}).status_code == 401


def test_bad_input_names_the_field(world: World, history: dict[str, str]) -> None:
    response = world.client("auditor").get("/api/v1/custody/", {})
    assert response.status_code == 400 and "device" in response.json()["error"]["fields"]
    response = world.client("auditor").get("/api/v1/custody/", {"device": "x", "from": "2026-12-02T00:00:00Z",
                                                                 "to": "2026-12-01T00:00:00Z"})  # fmt: skip
    assert response.status_code == 400 and "to" in response.json()["error"]["fields"]


def test_csv_and_json_lines_are_audited_downloads(world: World, history: dict[str, str]) -> None:
    response = world.client("auditor").get("/api/v1/custody/", {"device": history["gpu"], "output": "csv"})
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [row["pod"] for row in rows] == ["train-a", "train-b"]
    response = world.client("auditor").get("/api/v1/custody/", {"allocation": history["allocation"], "output": "jsonl"})
    assert [json.loads(line)["pod"] for line in response.content.decode().splitlines()] == ["train-a", "train-b"]
    assert AuditEvent.objects.filter(action="custody.exported").count() == 2


def _bundle(world: World, device: str) -> list[str]:
    response = world.client("auditor").get("/api/v1/custody/", {"device": device, "output": "bundle"})
    assert response.status_code == 200
    lines: list[str] = response.content.decode().splitlines(keepends=True)
    return lines


def test_the_bundle_verifies_offline_and_an_edited_one_does_not(world: World, history: dict[str, str]) -> None:
    lines = _bundle(world, history["gpu"])
    assert bundle_verify(lines).startswith("OK custody bundle: 2 answer rows")
    edited = [line.replace('"train-a"', '"someone-else"', 1) if '"type": "event"' in line else line for line in lines]
    with pytest.raises(BundleDefect, match="altered"):
        bundle_verify(edited)
    answer_edited = [line.replace('"train-b"', '"train-c"') if '"type": "answer"' in line else line for line in lines]
    with pytest.raises(BundleDefect, match="differs from the ledger row"):
        bundle_verify(answer_edited)
    second_event = [index for index, line in enumerate(lines) if '"type": "event"' in line][1]
    dropped = lines[:second_event] + lines[second_event + 1:]
    with pytest.raises(BundleDefect, match="missing"):
        bundle_verify(dropped)


POSTGRES: pytest.MarkDecorator = requires_postgres()


@POSTGRES
def test_the_app_role_cannot_change_the_ledger(world: World, history: dict[str, str]) -> None:
    from django.db import DatabaseError, transaction

    for statement in ("UPDATE custody_event SET pod = 'x'", "DELETE FROM custody_event"):
        with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement)


@pytest.fixture
def ledger_emptied() -> Iterator[None]:
    """A transactional test commits ledger rows, which the test database's flush never empties
    (the table is the ledger's own DDL): the owner removes them afterwards."""
    yield
    _tamper("DELETE FROM custody_event")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("ledger_emptied")
def test_a_ledger_tampered_by_its_owner_fails_verification(world: World, history: dict[str, str]) -> None:
    _bundle(world, history["gpu"])  # anchors the heads in the audit log
    _tamper("UPDATE custody_event SET pod = 'someone-else' WHERE pod = 'train-a' AND kind = 'closed'")
    with pytest.raises(BundleDefect, match="altered"):
        bundle_verify(_bundle(world, history["gpu"]))


def _tamper(sql: str) -> None:
    """As the database owner who drops the ledger's triggers (they come back afterwards)."""
    from tests.audit.conftest import owner_connection

    statements = [*statements_for(connection.vendor, "drop_triggers"), sql, *statements_for(connection.vendor, "triggers")]
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
        return
    with owner_connection() as owner:
        for statement in statements:
            owner.execute(statement)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("ledger_emptied")
def test_a_rewrite_with_every_hash_recomputed_still_fails_against_the_audit_log_anchor(
    world: World, history: dict[str, str]
) -> None:
    from custody.chain import row_hash
    from custody.models import CustodyEvent

    _bundle(world, history["gpu"])  # anchors the heads in the audit log (custody.anchored)
    node_id = CustodyEvent.objects.filter(pod="train-a").values_list("node_id", flat=True).first()
    assert node_id is not None
    last = CustodyEvent.objects.filter(node_id=node_id).order_by("-chain_seq").first()  # the head the anchor names
    assert last is not None
    forged = {field: getattr(last, field) for field in ("node_id", "chain_seq", "kind", "recorded_at", "cluster", "node",
              "gpu_uuid", "device_id", "resource", "sharing", "namespace", "pod", "pod_uid", "container", "project_id",
              "department_id", "allocation_id", "attribution", "started_at", "start_observed", "ended_at",
              "end_observed", "gone_at", "confidence", "gap_cause", "opened_seq", "prev_hash")}  # fmt: skip
    forged["pod"] = "someone-else"
    digest = row_hash(forged)
    _tamper(f"UPDATE custody_event SET pod = 'someone-else', hash = '{digest}' WHERE id = {last.id}")  # noqa: S608
    _tamper(f"UPDATE custody_node_state SET chain_head = '{digest}' WHERE node_id = {last.node_id}")  # noqa: S608
    with pytest.raises(BundleDefect, match="anchored"):
        bundle_verify(_bundle(world, history["gpu"]))

"""Availability: a row appended past ``audit_record`` (as the application's database role can)
stops checkpoints and bundle exports; ``manage.py audit_recover`` moves it and what chained onto it
into quarantine, resumes the chain on the last good event, records both in the log and signs a
checkpoint; afterwards checkpoints and exports work again and every verifier reports the quarantine."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction
from django.urls import include, path

from audit.checkpoints import AuditIntegrityError, checkpoint_publish
from audit.integrity.canonical import canonical_json, leaf_hash
from audit.integrity.checkpoint import checkpoint_verify
from audit.integrity.errors import VerificationFailure
from audit.integrity.keys import VerifierKey
from audit.integrity.quarantine import quarantine_digest
from audit.integrity.store import CheckpointFolder, checkpoint_chain_verify
from audit.integrity.verifier import BundleVerifier
from audit.models import AuditEvent, AuditQuarantine, AuditQuarantinedEvent
from audit.recovery import RecoveryRefused, quarantine_and_reanchor, quarantine_rows, recovery_diagnose
from audit.verification import audit_log_verify
from tests.audit.conftest import (
    COLUMNS,
    Publish,
    append_past_audit_record,
    connection_is_owner,
    next_record,
    record,
    record_many,
    wrong_prev,
)
from tests.conftest import World

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.audit.test_recovery")]

urlpatterns = [path("api/v1/audit/", include("compliance.urls"))]

BASE = "/api/v1/audit"
def _wrong_hash() -> tuple[str, str]:
    _, text = next_record()
    return text, "0" * 64


def _not_json() -> tuple[str, str]:
    return "this is not a record", "1" * 64


def _not_ascii() -> tuple[str, str]:
    _, text = next_record()
    return text.replace("audit_record", "audit_r\u00e9cord"), "2" * 64


MALFORMED: dict[str, Callable[[], tuple[str, str]]] = {
    "wrong prev_hash": wrong_prev, "wrong hash": _wrong_hash, "not JSON": _not_json, "not ASCII": _not_ascii,
}


def streamed(response: Any) -> bytes:
    assert response.status_code == 200, getattr(response, "content", b"")
    return b"".join(response.streaming_content)


def needs_owner() -> None:
    if not connection_is_owner():
        pytest.skip("the recovery needs the owner's connection; this run connects as the app role")


# -- reproducing the outage ---------------------------------------------------------------------

@pytest.mark.parametrize("kind", list(MALFORMED))
def test_a_row_appended_past_audit_record_stops_checkpoints_and_bundle_exports(
    world: World, publish: Publish, kind: str, capsys: Any
) -> None:
    record()
    publish()
    bad = append_past_audit_record(MALFORMED[kind])
    after = record(world.nlp.pk)  # later events chain onto the bad row: the bad suffix grows
    with pytest.raises(AuditIntegrityError) as refused:
        checkpoint_publish()
    assert refused.value.failure.seq in (bad - 1, bad), refused.value  # a wrong prev_hash names its predecessor
    response = world.client("auditor").get(f"{BASE}/export/", {"output": "bundle"})
    assert response.status_code == 503 and response.json()["error"]["code"] == "audit_unavailable"
    assert world.client("auditor").get(f"{BASE}/export/", {"output": "jsonl"}).status_code == 200
    found = recovery_diagnose()
    assert found.first_bad == bad and found.log_size >= after.seq and found.failure is not None
    with pytest.raises(CommandError, match="recovery needed"):
        call_command("audit_recover")
    assert f"--quarantine-from {bad}" in capsys.readouterr().out


# -- the recovery ---------------------------------------------------------------------------------

@pytest.fixture
def broken(world: World, publish: Publish) -> dict[str, Any]:
    needs_owner()
    record_many([world.nlp.pk, None])
    signed = publish()
    bad = append_past_audit_record()
    chained = record_many([world.nlp.pk, None])  # genuine events, chained onto the bad row
    with pytest.raises(AuditIntegrityError):
        checkpoint_publish()
    rows = list(AuditEvent.objects.filter(seq__gte=bad).order_by("seq").values_list("seq", "hash", "record"))
    return {"signed": signed, "bad": bad, "chained": chained, "rows": rows}


def recover(broken: dict[str, Any], django_capture_on_commit_callbacks: Any, capsys: Any) -> str:
    with django_capture_on_commit_callbacks(execute=True):
        call_command("audit_recover", "--quarantine-from", str(broken["bad"]), "--reason", "INC-42: bad insert",
                     "--operator", "oncall")
    return str(capsys.readouterr().out)


def test_recovery_moves_the_bad_suffix_into_quarantine_and_resumes_the_chain(
    broken: dict[str, Any], folder: CheckpointFolder, verifier_key: VerifierKey, publish: Publish,
    django_capture_on_commit_callbacks: Any, capsys: Any,
) -> None:
    bad, rows = broken["bad"], broken["rows"]
    out = recover(broken, django_capture_on_commit_callbacks, capsys)
    quarantine = AuditQuarantine.objects.get()
    assert f"quarantine #{quarantine.id}: moved 3 rows" in out
    assert (quarantine.from_seq, quarantine.to_seq, quarantine.event_count) == (bad, bad + 2, 3)
    assert quarantine.checkpoint_size == broken["signed"].size and quarantine.reason == "INC-42: bad insert"
    kept = list(AuditQuarantinedEvent.objects.filter(quarantine_id=quarantine.id).order_by("seq")
                .values_list("seq", "hash", "record"))
    assert kept == rows  # the evidence, exactly as it was
    assert quarantine_digest(quarantine_rows(AuditQuarantinedEvent, quarantine_id=quarantine.id)) == quarantine.digest

    quarantined, reanchored = AuditEvent.objects.filter(seq__gte=bad).order_by("seq")
    before = AuditEvent.objects.get(seq=bad - 1)
    assert (quarantined.seq, quarantined.action, reanchored.action) == (bad, "audit.quarantined", "audit.reanchored")
    assert quarantined.prev_hash == before.hash == quarantine.anchor_hash  # re-anchored on the last good event
    details = quarantined.details
    assert (details["from_seq"], details["to_seq"], details["events"]) == (bad, bad + 2, 3)
    assert details["digest"] == quarantine.digest and details["reason"] == "INC-42: bad insert"
    assert details["failure"]["seq"] == bad and details["operator"] == "oncall"
    assert [row[0] for row in details["rows"]] == [bad, bad + 1, bad + 2]

    signed = checkpoint_verify(folder.read(folder.numbers()[-1]), [verifier_key])
    assert signed.size == reanchored.seq and signed.quarantines == 1
    assert signed.quarantine_head.hex() == quarantined.hash
    assert checkpoint_chain_verify(folder.notes(), [verifier_key], from_genesis=False, proofs=folder.proof).count >= 2
    later = record()  # the log takes events again, and checkpoints are signed again
    assert later.prev_hash == reanchored.hash
    assert publish().size == later.seq


def test_after_recovery_exports_work_and_every_verifier_reports_the_quarantine(
    world: World, broken: dict[str, Any], verifier_key: VerifierKey, django_capture_on_commit_callbacks: Any,
    capsys: Any,
) -> None:
    bad = broken["bad"]
    recover(broken, django_capture_on_commit_callbacks, capsys)
    with django_capture_on_commit_callbacks(execute=True):
        full = streamed(world.client("auditor").get(f"{BASE}/export/", {"output": "bundle"})).splitlines()
        department = streamed(world.client("nlp_admin").get(f"{BASE}/export/", {"output": "bundle"})).splitlines()
    for lines in (full, department):
        report = BundleVerifier([verifier_key]).verify(lines)
        (line,) = report.quarantines
        assert f"seqs {bad}..{bad + 2}" in line and "INC-42: bad insert" in line and f"re-anchored on seq {bad - 1}" in line
        assert "QUARANTINE: quarantine #" in report.summary()
    disclosed = [line for line in department if line.startswith(b'{"@":"quarantine"')]
    assert len(disclosed) == 1  # a department's bundle reveals the quarantine, which belongs to no department

    hidden = [canonical_json({"@": "nodes", "nodes": [[bad - 1, 0, leaf_hash(
        json.loads(line)["record"].encode()).hex()]]}) if line in disclosed else line for line in department]
    with pytest.raises(VerificationFailure) as failure:
        BundleVerifier([verifier_key]).verify(hidden)
    assert failure.value.kind == "quarantine-hidden" and "counts 1 quarantines" in failure.value.message

    live = audit_log_verify()
    assert len(live.quarantines) == 1 and "QUARANTINE:" in live.summary()


def test_the_quarantine_is_append_only_and_checked_against_its_digest(
    broken: dict[str, Any], django_capture_on_commit_callbacks: Any, capsys: Any
) -> None:
    recover(broken, django_capture_on_commit_callbacks, capsys)
    quarantine = AuditQuarantine.objects.get()
    for statement in ("DELETE FROM audit_quarantined_event", "UPDATE audit_quarantine SET reason = 'nothing'"):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement)
    with connection.cursor() as cursor:  # the owner can still add a row: the recorded digest catches it
        cursor.execute(
            f"INSERT INTO audit_quarantined_event (quarantine_id, {COLUMNS}) SELECT %s, seq + 1000, occurred_at, "  # noqa: S608
            "actor_id, actor_username, action, target_type, target_id, department_id, department_seq, outcome, "
            "request_id, hash, record FROM audit_quarantined_event WHERE quarantine_id = %s AND seq = %s",
            [quarantine.id, quarantine.id, quarantine.from_seq],
        )
    with pytest.raises(VerificationFailure, match="no longer match the digest") as failure:
        audit_log_verify()
    assert failure.value.kind == "quarantine-altered"


def test_the_recovery_refuses_what_it_must_not_do(
    world: World, broken: dict[str, Any], django_capture_on_commit_callbacks: Any, capsys: Any
) -> None:
    bad, signed = broken["bad"], broken["signed"]
    with pytest.raises(RecoveryRefused, match="must lie after checkpoint"):
        quarantine_and_reanchor(from_seq=signed.size, reason="x", operator="oncall")  # signed history: never
    with pytest.raises(RecoveryRefused, match="at or before the first row that fails"):
        quarantine_and_reanchor(from_seq=bad + 1, reason="x", operator="oncall")  # would keep the bad row
    with pytest.raises(RecoveryRefused, match="reason"):
        quarantine_and_reanchor(from_seq=bad, reason=" ", operator="oncall")
    assert AuditEvent.objects.filter(seq__gte=bad).count() == 3 and not AuditQuarantine.objects.exists()
    recover(broken, django_capture_on_commit_callbacks, capsys)
    with pytest.raises(CommandError, match="(?s)REFUSED: .*nothing to recover"):
        call_command("audit_recover", "--quarantine-from", str(bad), "--reason", "again")
    call_command("audit_recover", "--list")
    listed = capsys.readouterr().out
    assert "quarantine #1 at " in listed and f"seqs {bad}..{bad + 2} (3 rows" in listed and "again" not in listed


def test_the_application_role_may_not_recover(world: World, publish: Publish) -> None:
    if connection.vendor != "postgresql" or connection_is_owner():
        pytest.skip("checks the application role's connection on PostgreSQL")
    record()
    publish()
    bad = append_past_audit_record()
    with pytest.raises(RecoveryRefused, match="owner's database connection"):
        quarantine_and_reanchor(from_seq=bad, reason="x", operator="app")
    with pytest.raises(DatabaseError, match="permission denied"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM audit_quarantine")

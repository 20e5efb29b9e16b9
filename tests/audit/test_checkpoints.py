"""Publishing checkpoints: signed, chained, written outside the database, resumable, and refused
when the log or the external folder disagrees with what was signed before."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection

from audit.checkpoints import AuditIntegrityError, checkpoint_backfill, checkpoint_publish
from audit.integrity.checkpoint import checkpoint_sign, checkpoint_verify, note_hash
from audit.integrity.keys import SigningKey, VerifierKey
from audit.integrity.merkle import reference_root
from audit.integrity.store import CheckpointFolder, checkpoint_chain_verify
from audit.models import AuditCheckpoint, AuditEvent
from audit.tasks import audit_checkpoint_publish_task
from tests.audit.conftest import Publish, record, record_many, tamper

pytestmark = pytest.mark.django_db


def all_hashes() -> list[bytes]:
    return [bytes.fromhex(value) for value in AuditEvent.objects.order_by("seq").values_list("hash", flat=True)]


def test_it_signs_the_size_root_and_head_of_the_log(verifier_key: VerifierKey, folder: CheckpointFolder,
                                                     publish: Publish) -> None:
    events = record_many([None, 1, 2, 1])
    row = publish()
    checkpoint = checkpoint_verify(row.note, [verifier_key])
    assert checkpoint.size == events[-1].seq == row.size
    assert checkpoint.root == reference_root(all_hashes())
    assert checkpoint.head.hex() == events[-1].hash
    assert checkpoint.departments_size >= 2
    assert folder.read(row.number) == row.note


def test_it_publishes_a_heartbeat_when_nothing_changed(verifier_key: VerifierKey, folder: CheckpointFolder,
                                                       publish: Publish) -> None:
    record()
    first = publish()
    second = publish()
    assert second.number == first.number + 1 and second.size == first.size and second.root == first.root
    assert checkpoint_verify(second.note, [verifier_key]).previous == note_hash(first.note)
    assert second.departments == ""  # the heads did not change: stored once
    summary = checkpoint_chain_verify(folder.notes(), [verifier_key], from_genesis=False)
    assert summary.count == 2


def test_it_resumes_from_the_previous_checkpoint(publish: Publish) -> None:
    record_many([1, 2, 3])
    publish()
    record_many([3, None, 1])
    row = publish()
    assert bytes.fromhex(row.root) == reference_root(all_hashes())
    heads = {department: (size, hash_) for department, size, hash_ in json.loads(row.departments)}
    last_of_1 = AuditEvent.objects.filter(department_id=1).order_by("-seq").first()
    assert last_of_1 is not None and heads[1] == (last_of_1.department_seq, last_of_1.hash)


def test_it_stores_subtree_roots_for_proofs(publish: Publish) -> None:
    start = AuditEvent.objects.count()
    record_many([None] * (512 - start % 256 + 5))
    publish()
    hashes = all_hashes()
    with connection.cursor() as cursor:
        cursor.execute("SELECT position, hash FROM audit_merkle_node WHERE level = 8 ORDER BY position")
        nodes = cursor.fetchall()
    assert len(nodes) == len(hashes) // 256
    for position, hash_ in nodes:
        assert bytes.fromhex(hash_) == reference_root(hashes[position * 256:(position + 1) * 256])


def test_it_refuses_to_sign_an_altered_event(publish: Publish) -> None:
    events = record_many([None, None, None])
    publish()
    newer = record()
    tamper("UPDATE audit_event SET record = replace(record, '\"index\":', '\"index\":1') WHERE seq = %s",
           [events[1].seq])
    tamper("UPDATE audit_event SET record = replace(record, 'node.updated', 'node.updatex') WHERE seq = %s",
           [newer.seq])
    with pytest.raises(AuditIntegrityError) as error:
        publish()
    assert error.value.failure.kind == "altered" and error.value.failure.seq == newer.seq


def test_it_refuses_to_go_on_when_the_folder_is_ahead_of_the_database(
    signing_key: SigningKey, folder: CheckpointFolder, publish: Publish
) -> None:
    record()
    row = publish()
    signed = checkpoint_verify(row.note, [signing_key.verifier])
    import dataclasses

    later = dataclasses.replace(signed, number=row.number + 1, previous=note_hash(row.note))
    folder.write(later.number, checkpoint_sign(later, signing_key))
    with pytest.raises(AuditIntegrityError, match="rolled back") as error:
        publish()
    assert error.value.failure.kind == "rollback"


def test_it_backfills_checkpoints_the_folder_missed(folder: CheckpointFolder) -> None:
    record()
    row = checkpoint_publish()  # its on-commit write never runs here: as if the folder write was lost
    assert row.number not in folder.numbers()
    assert checkpoint_backfill(folder) >= 1
    assert folder.read(row.number) == row.note


def test_it_needs_a_signing_key_outside_debug(settings: Any) -> None:
    settings.GPUPORTAL_AUDIT_SIGNING_KEY = None
    settings.DEBUG = False
    with pytest.raises(ImproperlyConfigured, match="GPUPORTAL_AUDIT_SIGNING_KEY"):
        checkpoint_publish()


def test_it_makes_a_development_key_in_debug(settings: Any, tmp_path: Any, publish: Publish) -> None:
    settings.GPUPORTAL_AUDIT_SIGNING_KEY = None
    settings.DEBUG = True
    settings.VAR_DIR = tmp_path
    settings.GPUPORTAL_AUDIT_TRUSTED_KEYS = []
    record()
    if AuditCheckpoint.objects.exists():
        pytest.skip("earlier checkpoints in this database were signed with another key")
    publish()
    assert (tmp_path / "audit-signing-key.pem").stat().st_mode & 0o077 == 0


def test_the_beat_task_and_the_command_publish(capsys: Any, publish: Publish) -> None:
    record()
    number = audit_checkpoint_publish_task.delay().get()
    assert AuditCheckpoint.objects.filter(number=number).exists()
    call_command("audit_checkpoint")
    assert f"checkpoint #{number + 1}:" in capsys.readouterr().out


def test_the_heartbeat_interval_is_a_setting_that_reaches_the_beat_schedule(tmp_path: Any) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    program = (
        "import django; django.setup(); from gpuportal.celery import app; "
        "print(app.conf.beat_schedule['audit-checkpoint-publish']['schedule'])"
    )
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "gpuportal.settings", "GPUPORTAL_VAR_DIR": str(tmp_path)}

    def schedule(value: str | None) -> subprocess.CompletedProcess[str]:
        env = {**environment, "GPUPORTAL_AUDIT_CHECKPOINT_INTERVAL_SECONDS": value or ""}
        return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=False, env=env,
                              cwd=Path(__file__).resolve().parents[2])

    assert schedule("15").stdout.strip() == "15.0"
    assert schedule(None).stdout.strip() == "60.0"
    refused = schedule("0")
    assert refused.returncode != 0 and "GPUPORTAL_AUDIT_CHECKPOINT_INTERVAL_SECONDS must be at least 1" in refused.stderr


def test_live_verification_warns_when_the_heartbeat_stopped(settings: Any, publish: Publish, monkeypatch: Any) -> None:
    import datetime

    from audit.conf import audit_checkpoint_interval_seconds
    from audit.verification import audit_log_verify

    settings.GPUPORTAL_AUDIT_CHECKPOINT_INTERVAL_SECONDS = 30
    assert audit_checkpoint_interval_seconds() == 30
    record()
    publish()
    assert not [warning for warning in audit_log_verify().warnings if "heartbeat" in warning]
    later = timezone_now() + datetime.timedelta(seconds=61)
    monkeypatch.setattr("audit.verification.clock_now", lambda: later)
    record()
    (warning,) = [warning for warning in audit_log_verify().warnings if "heartbeat" in warning]
    assert "more than twice the heartbeat interval (30 s)" in warning and "The 1 events since" in warning


def timezone_now() -> Any:
    from django.utils import timezone

    return timezone.now()


def test_every_checkpoint_in_the_folder_has_a_proof_of_consistency(
    verifier_key: VerifierKey, folder: CheckpointFolder, publish: Publish
) -> None:
    record_many([None, 1])
    publish()
    record_many([2, 2, None])
    publish()
    publish()  # a heartbeat: an empty extension
    summary = checkpoint_chain_verify(folder.notes(), [verifier_key], from_genesis=False, proofs=folder.proof)
    assert summary.consistent == summary.count - 1 == 2
    numbers = folder.numbers()
    assert all(folder.proof_path_for(number).stat().st_mode & 0o222 == 0 for number in numbers)  # read-only
    written = [folder.proof(number) for number in numbers]
    assert written[-1] is not None and written[-1].extension == ()  # the heartbeat added nothing
    for number in numbers:  # lost writes: backfill writes both files again, the same
        folder.proof_path_for(number).unlink()
        folder.path_for(number).unlink()
    assert checkpoint_backfill(folder) == len(numbers)
    assert [folder.proof(number) for number in numbers] == written
    assert checkpoint_chain_verify(folder.notes(), [verifier_key], from_genesis=False, proofs=folder.proof).consistent == 2

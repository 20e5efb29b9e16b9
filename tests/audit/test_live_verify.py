"""``manage.py audit_verify``: the live database against the signed checkpoints and the folder.
Each test plays an attacker with the owner's rights (triggers dropped) and expects the verifier
to name the kind of tampering and the first bad sequence number."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from audit.integrity.errors import VerificationFailure
from audit.verification import audit_log_verify
from tests.audit.conftest import Publish, record_many, tamper

pytestmark = pytest.mark.django_db


@pytest.fixture
def log(publish: Publish) -> list[Any]:
    events = record_many([None, 1, 2, 1, 2, None, 1, 2])
    publish()
    return events


def fails(kind: str, seq: int | None = None) -> VerificationFailure:
    with pytest.raises(VerificationFailure) as failure:
        audit_log_verify()
    assert failure.value.kind == kind, failure.value
    if seq is not None:
        assert failure.value.seq == seq, failure.value
    return failure.value


def test_it_passes_an_untouched_log(log: list[Any], capsys: Any) -> None:
    record_many([None, 2])  # events after the latest checkpoint are checked too
    report = audit_log_verify()
    assert report.events >= len(log) + 2 and report.checkpoints >= 1 and report.folder_checkpoints >= 1
    call_command("audit_verify")
    assert capsys.readouterr().out.startswith("OK: ")


def test_it_names_an_altered_event(log: list[Any]) -> None:
    tamper("UPDATE audit_event SET record = replace(record, '\"index\":3', '\"index\":9') WHERE seq = %s",
           [log[3].seq])
    assert "column hash" in fails("altered", log[3].seq).message


def test_it_names_an_altered_event_whose_hash_column_was_recomputed(log: list[Any]) -> None:
    from audit.integrity.canonical import leaf_hash

    forged = log[3].record.replace('"index":3', '"index":9')
    tamper("UPDATE audit_event SET record = %s, hash = %s WHERE seq = %s",
           [forged, leaf_hash(forged.encode()).hex(), log[3].seq])
    assert "prev_hash recorded by seq" in fails("altered", log[3].seq).message


def test_it_names_a_changed_filter_column(log: list[Any]) -> None:
    tamper("UPDATE audit_event SET action = 'auth.login' WHERE seq = %s", [log[2].seq])
    assert "column action" in fails("altered", log[2].seq).message


def test_it_names_a_deleted_event(log: list[Any]) -> None:
    tamper("DELETE FROM audit_event WHERE seq = %s", [log[4].seq])
    assert "deleted" in fails("missing", log[4].seq).message


def test_it_names_deleted_last_events(log: list[Any]) -> None:
    tamper("DELETE FROM audit_event WHERE seq >= %s", [log[-2].seq])
    assert "were deleted" in fails("truncated", log[-2].seq).message


def test_it_names_a_rewritten_last_event(log: list[Any]) -> None:
    from audit.integrity.canonical import leaf_hash

    forged = log[-1].record.replace('"index":7', '"index":70')
    tamper("UPDATE audit_event SET record = %s, hash = %s WHERE seq = %s",
           [forged, leaf_hash(forged.encode()).hex(), log[-1].seq])
    assert "rewritten" in fails("rewritten", log[-1].seq).message


def test_it_names_a_database_rolled_back_behind_the_external_folder(log: list[Any], publish: Publish) -> None:
    record_many([1])
    latest = publish()
    tamper("DELETE FROM audit_checkpoint WHERE number = %s", [latest.number])
    tamper("DELETE FROM audit_event WHERE seq > %s", [log[-1].seq])
    assert f"checkpoint #{latest.number} is in the external folder" in fails("rollback").message


def test_the_command_exits_non_zero_and_names_the_failure(log: list[Any]) -> None:
    tamper("DELETE FROM audit_event WHERE seq = %s", [log[4].seq])
    with pytest.raises(CommandError, match=rf"FAILED seq {log[4].seq} \[missing\]") as error:
        call_command("audit_verify")
    assert error.value.returncode == 1

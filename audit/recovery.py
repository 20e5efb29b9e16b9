"""Recovering the log's availability after a row that does not verify: quarantine and re-anchor.

The application's database role may INSERT into ``audit_event`` (it must, to record events), so a
bug or an intruder on the application's connection can append a row that bypasses
``audit_record``: a wrong hash, a broken link, an unreadable record. The triggers accept it as long
as its ``seq`` is the next number, every later event chains onto it, and from then on no
checkpoint can be signed (``AuditIntegrityError``), so bundle exports answer 503.

``recovery_diagnose`` finds the first row after the latest checkpoint that does not verify.
``quarantine_and_reanchor``, run by an operator with the owner's connection
(``manage.py audit_recover``), then in one transaction, holding the chain lock:

1. copies every row from the chosen ``seq`` to the end, every column as it was, into
   ``audit_quarantined_event`` under a new ``audit_quarantine`` row (the reason, the failure, the
   latest checkpoint, a SHA-256 digest of the rows); nothing is deleted that is not kept there;
2. removes those rows from ``audit_event`` (the delete trigger is switched off for this statement
   only, inside the transaction), so the chain ends on the last event that verifies;
3. appends ``audit.quarantined`` (what was moved, why, its digest) and ``audit.reanchored`` (the
   event the chain resumes on), so the recovery itself is in the log, where every later checkpoint
   counts it and every bundle reveals it;
4. signs a checkpoint. If it still cannot be signed, everything rolls back.

Only rows that no checkpoint covers may be moved: what a checkpoint signed is never touched, and a
defect there is tampering, for ``manage.py audit_verify``, not something to recover from.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from audit import actions
from audit.checkpoints import CHECKPOINT_LOCK_ID, checkpoint_publish, checkpoint_resume, events_after
from audit.integrity.canonical import GENESIS_HASH
from audit.integrity.errors import VerificationFailure
from audit.integrity.quarantine import ROW_FIELDS, quarantine_digest
from audit.models import AuditCheckpoint, AuditEvent, AuditQuarantine, AuditQuarantinedEvent
from audit.schema import statements_for
from audit.services import audit_record, audit_time_format, chain_lock
from kernel.clock import clock_now

ROWS_LISTED = 20  # rows summarised in the audit.quarantined event (all of them are in the quarantine table)
_COLUMNS = ", ".join(ROW_FIELDS)


class RecoveryRefused(Exception):
    """The recovery cannot or must not run; nothing was changed."""


@dataclass(frozen=True)
class Diagnosis:
    checkpoint_number: int  # the latest checkpoint (0: none yet)
    checkpoint_size: int
    log_size: int
    failure: VerificationFailure | None  # why the first row that does not verify fails
    first_bad: int | None  # that row's seq

    def describe(self) -> str:
        covered = (f"checkpoint #{self.checkpoint_number} covers seqs 1..{self.checkpoint_size}"
                   if self.checkpoint_number else "no checkpoint yet")
        lines = [f"{covered}; the log has {self.log_size} events"]
        if self.failure is None:
            lines.append("every event after the latest checkpoint verifies: nothing to recover")
        else:
            lines.append(f"FAILED seq {self.first_bad} [{self.failure.kind}]: {self.failure.message}")
            lines.append(
                f"to recover: manage.py audit_recover --quarantine-from {self.first_bad} --reason '...' moves seqs "
                f"{self.first_bad}..{self.log_size} ({self.log_size - (self.first_bad or 0) + 1} rows) into quarantine"
            )
        return "\n".join(lines)


@dataclass(frozen=True)
class Recovery:
    quarantine: AuditQuarantine
    quarantined: AuditEvent  # the audit.quarantined event
    reanchored: AuditEvent  # the audit.reanchored event
    checkpoint: AuditCheckpoint


def recovery_diagnose() -> Diagnosis:
    """Replay the events after the latest checkpoint and find the first that does not verify.
    Raises ``RecoveryRefused`` when the defect is not there (the checkpoints themselves, or the
    events they cover, or the external folder): quarantine cannot help with those."""
    latest = AuditCheckpoint.objects.order_by("-number").first()
    try:
        state, _ = checkpoint_resume(latest)
    except VerificationFailure as failure:
        raise RecoveryRefused(
            f"the latest checkpoint or the events it covers fail verification ({failure}): that is tampering with "
            "signed history, not a row to quarantine; run manage.py audit_verify"
        ) from None
    upto = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
    number, size = (latest.number, latest.size) if latest is not None else (0, 0)
    if upto < size:
        raise RecoveryRefused(f"the log has {upto} events but checkpoint #{number} covers {size}: run audit_verify")
    for seq, stored_hash, record in events_after(after=state.size, upto=upto):
        try:
            if seq != state.size + 1:
                raise VerificationFailure("missing", f"seq {state.size + 1} is missing", seq=state.size + 1)
            event = state.append(str(record).encode("ascii", "replace"))
            if event.hash_hex != stored_hash:
                raise VerificationFailure("altered", f"the stored hash of seq {seq} does not match its record", seq=seq)
        except VerificationFailure as failure:
            where = f"every event before seq {seq} verifies" if seq > 1 else "it is the first event"
            named = VerificationFailure(failure.kind, f"{failure.message} ({where}; seq {seq} is the first row that does not)",
                                        seq=seq)
            return Diagnosis(number, size, upto, named, seq)
    return Diagnosis(number, size, upto, None, None)


def _owner_check() -> None:
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_has_role(current_user, tableowner, 'MEMBER') FROM pg_tables WHERE tablename = 'audit_quarantine'"
        )
        row = cursor.fetchone()
    if not (row and row[0]):
        raise RecoveryRefused(
            "run audit_recover with the owner's database connection (the role that runs migrate): the application's "
            "role may not touch the quarantine"
        )


def quarantine_rows(model: type[AuditEvent] | type[AuditQuarantinedEvent], **filters: Any) -> Iterator[tuple[Any, ...]]:
    """The rows ``quarantine_digest`` covers, in ``seq`` order, from ``audit_event`` or the quarantine."""
    for row in model.objects.filter(**filters).order_by("seq").values_list(*ROW_FIELDS).iterator(chunk_size=2000):
        values = list(row)
        values[1] = audit_time_format(values[1])
        yield tuple(values)


def _summaries(from_seq: int) -> list[list[Any]]:
    rows = (AuditEvent.objects.filter(seq__gte=from_seq).order_by("seq")
            .values_list("seq", "action", "actor_username", "hash")[:ROWS_LISTED])
    return [list(row) for row in rows]


def _delete_from(from_seq: int) -> int:
    with connection.cursor() as cursor:
        for statement in statements_for(connection.vendor, "event_delete_off"):
            cursor.execute(statement)
        cursor.execute("DELETE FROM audit_event WHERE seq >= %s", [from_seq])
        deleted = cursor.rowcount
        for statement in statements_for(connection.vendor, "event_delete_on"):
            cursor.execute(statement)
    return int(deleted)


def quarantine_and_reanchor(*, from_seq: int, reason: str, operator: str) -> Recovery:
    """Move rows ``from_seq``.. out of the chain into a new quarantine, record it, and sign a
    checkpoint (see the module's docstring). Raises ``RecoveryRefused`` (nothing changed) when the
    range is not one to quarantine, or ``AuditIntegrityError`` (rolled back) when no checkpoint can
    be signed even then."""
    if not reason.strip():
        raise RecoveryRefused("give the reason for the quarantine (--reason): it is recorded in the log")
    with transaction.atomic():
        _owner_check()
        chain_lock(connection)  # writers queue until the recovery commits
        chain_lock(connection, CHECKPOINT_LOCK_ID)
        found = recovery_diagnose()
        if found.failure is None or found.first_bad is None:
            raise RecoveryRefused(found.describe())
        if not found.checkpoint_size < from_seq <= found.first_bad:
            raise RecoveryRefused(
                f"--quarantine-from must lie after checkpoint #{found.checkpoint_number} (seq {found.checkpoint_size}) "
                f"and at or before the first row that fails (seq {found.first_bad}); got {from_seq}"
            )
        with connection.cursor() as cursor:  # subtree roots are stored for checkpointed events only
            cursor.execute("SELECT count(*) FROM audit_merkle_node WHERE ((position + 1) << level) > %s",
                           [found.checkpoint_size])
            if cursor.fetchone()[0]:
                raise RecoveryRefused("stored subtree roots reach past the latest checkpoint: run manage.py audit_verify")
        anchor = (AuditEvent.objects.filter(seq=from_seq - 1).values_list("hash", flat=True).first()
                  if from_seq > 1 else GENESIS_HASH)
        assert anchor is not None  # verified by the diagnosis
        count = found.log_size - from_seq + 1
        digest = quarantine_digest(quarantine_rows(AuditEvent, seq__gte=from_seq))
        listed = _summaries(from_seq)
        quarantine = AuditQuarantine.objects.create(
            id=(AuditQuarantine.objects.order_by("-id").values_list("id", flat=True).first() or 0) + 1,
            created_at=clock_now(), from_seq=from_seq, to_seq=found.log_size, event_count=count, digest=digest,
            checkpoint_number=found.checkpoint_number, checkpoint_size=found.checkpoint_size, anchor_hash=anchor,
            failure_kind=found.failure.kind, failure_seq=found.first_bad, failure_message=found.failure.message,
            reason=reason, operator=operator,
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO audit_quarantined_event (quarantine_id, {_COLUMNS}) "  # noqa: S608 (fixed names)
                f"SELECT %s, {_COLUMNS} FROM audit_event WHERE seq >= %s ORDER BY seq",
                [quarantine.id, from_seq],
            )
        if quarantine_digest(quarantine_rows(AuditQuarantinedEvent, quarantine_id=quarantine.id)) != digest:
            raise RecoveryRefused("the quarantined copy differs from the rows it copies; nothing was changed")
        if _delete_from(from_seq) != count:
            raise RecoveryRefused("rows were appended during the recovery; nothing was changed")
        common = {"quarantine": quarantine.id, "operator": operator, "via": "cli",
                  "checkpoint": {"number": found.checkpoint_number, "size": found.checkpoint_size},
                  "anchor": {"seq": from_seq - 1, "hash": anchor}}
        quarantined = audit_record(actor=None, action=actions.AUDIT_QUARANTINED, details={
            **common, "from_seq": from_seq, "to_seq": found.log_size, "events": count, "digest": digest,
            "reason": reason, "failure": {"kind": found.failure.kind, "seq": found.first_bad,
                                          "message": found.failure.message},
            "rows": listed, "rows_listed": len(listed),
        })
        assert quarantined.seq == from_seq, "the chain lock is held: the record takes the first quarantined seq"
        reanchored = audit_record(actor=None, action=actions.AUDIT_REANCHORED, details=common)
        checkpoint = checkpoint_publish()
    return Recovery(quarantine=quarantine, quarantined=quarantined, reanchored=reanchored, checkpoint=checkpoint)


def quarantines_list() -> list[AuditQuarantine]:
    return list(AuditQuarantine.objects.order_by("id"))


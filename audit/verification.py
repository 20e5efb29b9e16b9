"""Verifying the live database against its checkpoints and the external checkpoint folder.

Replays every event from genesis with the same code as the offline verifier and checks: the chain
and the department chains, the stored hash and filter columns against each record, every
checkpoint's signature and chain (in the database and in the folder, with the folder's proof
files), that the folder holds no checkpoint the database lacks, that every checkpoint's roots and
quarantine count match the log's prefix of its size, that the log is not shorter than any
checkpoint, and, where this connection may read them (the owner's), that the quarantine tables
still hold what each ``audit.quarantined`` event recorded. It warns when the latest checkpoint is
older than twice the heartbeat interval: the window in which recent events could go unnoticed.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from audit.conf import audit_checkpoint_folder, audit_checkpoint_interval_seconds, audit_trusted_keys
from audit.integrity.divergence import Range, divergence_bounds, subtree_facts
from audit.integrity.errors import VerificationFailure
from audit.integrity.fork import ForkWatch
from audit.integrity.keys import VerifierKey
from audit.integrity.merkle import CompactRange
from audit.integrity.quarantine import QUARANTINE_ACTION, quarantine_describe, quarantine_digest
from audit.integrity.replay import ReplayState
from audit.integrity.store import ChainSummary, CheckpointFolder, checkpoint_chain_verify
from audit.models import AuditCheckpoint, AuditQuarantine, AuditQuarantinedEvent
from audit.recovery import quarantine_rows
from audit.services import audit_time_format
from kernel.clock import clock_now
from kernel.words import counted

CHUNK = 5000
COLUMNS = (
    "seq", "occurred_at", "actor_id", "actor_username", "action", "target_type", "target_id", "department_id",
    "department_seq", "outcome", "request_id", "hash", "record",
)
_COPIED = ("actor_id", "actor_username", "action", "target_type", "target_id", "department_id", "department_seq",
           "outcome", "request_id")


@dataclass
class LiveReport:
    events: int = 0
    checkpoints: int = 0
    folder_checkpoints: int = 0
    warnings: list[str] = field(default_factory=list)
    quarantines: list[str] = field(default_factory=list)  # one line per audit.quarantined event

    def summary(self) -> str:
        lines = [
            f"OK: {counted(self.events, 'event')}, {counted(self.checkpoints, 'checkpoint')} in the database and "
            f"{self.folder_checkpoints} in the external folder verified"
        ]
        lines.extend(f"QUARANTINE: {line}" for line in self.quarantines)
        lines.extend(f"warning: {warning}" for warning in self.warnings)
        return "\n".join(lines)


def _database_notes() -> Iterator[str]:
    yield from AuditCheckpoint.objects.order_by("number").values_list("note", flat=True).iterator(chunk_size=1000)


def _rows() -> Iterator[dict[str, Any]]:
    position = 0
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {', '.join(COLUMNS)} FROM audit_event WHERE seq > %s ORDER BY seq LIMIT %s",  # noqa: S608
                [position, CHUNK],
            )
            rows = cursor.fetchall()
        if not rows:
            return
        for row in rows:
            yield dict(zip(COLUMNS, row, strict=True))
        position = rows[-1][0]


def _time_text(value: Any) -> Any:
    if isinstance(value, str):  # SQLite through a raw cursor
        value = datetime.datetime.fromisoformat(value).replace(tzinfo=datetime.UTC)
    return audit_time_format(value) if isinstance(value, datetime.datetime) else value


def _columns_check(row: dict[str, Any], computed_hash: str) -> None:
    record = json.loads(row["record"])
    seq = record["seq"]
    expected = {"seq": seq, "occurred_at": record["occurred_at"], "hash": computed_hash}
    expected.update({name: record[name] for name in _COPIED})
    actual = {**row, "occurred_at": _time_text(row["occurred_at"])}
    for name, value in expected.items():
        if actual[name] != value:
            raise VerificationFailure(
                "altered", f"column {name} of seq {seq} ({actual[name]!r}) disagrees with its record ({value!r})",
                seq=seq,
            )


def _cross_check(database: ChainSummary, folder: ChainSummary, report: LiveReport) -> None:
    for number, digest in sorted(folder.notes_by_number.items()):
        known = database.notes_by_number.get(number)
        if known is None:
            raise VerificationFailure(
                "rollback",
                f"checkpoint #{number} is in the external folder but not in the database: the database was rolled "
                "back or its checkpoints were deleted",
            )
        if known != digest:
            raise VerificationFailure("split-view", f"checkpoint #{number} differs between the database and the folder")
    missing = database.count - folder.count
    if missing > 0:
        report.warnings.append(f"{counted(missing, 'checkpoint')} {'is' if missing == 1 else 'are'} not in the external folder "
                               "yet (the next publish writes them)")


def _checkpoint_facts(summary: ChainSummary, size: int, *, database: bool) -> dict[Range, bytes]:
    """What the checkpoint of ``size`` events says about its history: its root and, when its
    compact range is at hand (the database row's, or the folder's proof file) and folds to that
    root, the subtrees of it."""
    root, number = summary.roots_by_size[size]
    facts: dict[Range, bytes] = {(0, size): root}
    if database:
        stored = AuditCheckpoint.objects.filter(number=number).values_list("frontier", flat=True).first()
        try:
            compact = CompactRange.from_frontier(size, [bytes.fromhex(value) for value in json.loads(stored or "")])
        except ValueError:
            return facts
        if compact.root() == root:
            facts.update(subtree_facts(compact.subtrees()))
    else:
        proof = summary.proof_at(size)
        if proof is not None:
            facts.update(proof.facts())
    return facts


def _prefix_check(state: ReplayState, database: ChainSummary, folder: ChainSummary, agreed: int) -> int:
    """Check the log's first ``state.size`` events against the checkpoints of that size; returns
    the size up to which the log agrees with the checkpoints."""
    for summary in (database, folder):
        known = summary.roots_by_size.get(state.size)
        if known is not None and state.compact.root() != known[0]:
            ours = {(0, state.size): state.compact.root(), **subtree_facts(state.compact.subtrees())}
            theirs = _checkpoint_facts(summary, state.size, database=summary is database)
            found = divergence_bounds(ours, theirs, agreed=agreed, bound=state.size)
            assert found is not None
            raise VerificationFailure(
                "rewritten",
                f"the first {state.size} events do not reproduce the root of checkpoint #{known[1]}: the log was "
                f"rewritten after that checkpoint was published ({found.describe()})",
                seq=found.first_seq if found.exact else state.size,
            )
        departments = summary.departments_by_size.get(state.size)
        if departments is not None and departments != (len(state.heads), state.departments_root()):
            raise VerificationFailure(
                "rewritten",
                f"the department heads after {state.size} events do not match the checkpoints of that size",
                seq=state.size or None,
            )
        quarantines = summary.quarantines_by_size.get(state.size)
        if quarantines is not None and quarantines != (state.quarantines, state.quarantine_head):
            raise VerificationFailure(
                "rewritten",
                f"the log's first {state.size} events hold {state.quarantines} quarantines, not what the checkpoints "
                "of that size count",
                seq=state.size or None,
            )
    known_sizes = state.size in database.roots_by_size or state.size in folder.roots_by_size
    return state.size if known_sizes else agreed


def _quarantines_readable() -> bool:
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT has_table_privilege('audit_quarantine', 'SELECT') "
            "AND has_table_privilege('audit_quarantined_event', 'SELECT')"
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def _quarantine_check(recorded: list[dict[str, Any]], report: LiveReport) -> None:
    """The quarantine tables against the audit.quarantined events, when this connection may read them."""
    if not _quarantines_readable():
        if recorded:
            report.warnings.append(
                "the quarantine tables are not readable by this database role: run audit_verify as the owner to check "
                "the quarantined rows against their recorded digests"
            )
        return
    stored = {row.id: row for row in AuditQuarantine.objects.order_by("id")}
    for event in recorded:
        details, seq = event["details"], event["seq"]
        row = stored.pop(details.get("quarantine"), None)
        facts = (details.get("from_seq"), details.get("to_seq"), details.get("events"), details.get("digest"))
        if row is None or facts != (row.from_seq, row.to_seq, row.event_count, row.digest):
            raise VerificationFailure(
                "quarantine-altered",
                f"quarantine #{details.get('quarantine')}, recorded at seq {seq}, is not in the quarantine table as "
                "recorded",
                seq=seq,
            )
        rows = quarantine_rows(AuditQuarantinedEvent, quarantine_id=row.id)
        if quarantine_digest(rows) != row.digest:
            raise VerificationFailure(
                "quarantine-altered",
                f"the rows of quarantine #{row.id} no longer match the digest recorded at seq {seq}",
                seq=seq,
            )
    if stored:
        raise VerificationFailure(
            "quarantine-altered",
            f"quarantine #{min(stored)} is in the quarantine table but no audit.quarantined event records it",
        )


def _heartbeat_check(report: LiveReport, events: int) -> None:
    latest = AuditCheckpoint.objects.order_by("-number").values_list("created_at", "size").first()
    interval = audit_checkpoint_interval_seconds()
    if latest is None:
        if events:
            report.warnings.append("no checkpoint has been published yet: is the beat process running?")
        return
    age = (clock_now() - latest[0]).total_seconds()
    if age > 2 * interval:
        report.warnings.append(
            f"the latest checkpoint is {age:.0f} s old, more than twice the heartbeat interval ({interval} s): is the "
            f"beat process running? The {max(0, events - latest[1])} events since are not yet committed to"
        )


def audit_log_verify(*, folder: CheckpointFolder | None = None, keys: list[VerifierKey] | None = None) -> LiveReport:
    """Raises ``VerificationFailure`` naming the first defect."""
    folder = folder or audit_checkpoint_folder()
    keys = keys if keys is not None else audit_trusted_keys()
    report = LiveReport()
    database = checkpoint_chain_verify(_database_notes(), keys)
    external = (checkpoint_chain_verify(folder.notes(), keys, proofs=folder.proof) if folder.numbers()
                else ChainSummary())
    _cross_check(database, external, report)
    report.checkpoints, report.folder_checkpoints = database.count, external.count
    state = ReplayState.empty()
    watch = ForkWatch(store=external, checkpoint=None, subject="the database's")  # with the folder's proof files
    agreed = _prefix_check(state, database, external, 0)
    recorded: list[dict[str, Any]] = []
    for row in _rows():
        event = state.append(str(row["record"]).encode("ascii", "replace"))
        _columns_check(row, event.hash_hex)
        if external.roots_by_size:
            watch.observe(state.size - 1, 0, event.hash)
            if state.size in external.roots_by_size:
                watch.check(state.compact)
        agreed = _prefix_check(state, database, external, agreed)
        if event.action == QUARANTINE_ACTION:
            recorded.append(json.loads(row["record"]))
            report.quarantines.append(quarantine_describe(str(row["record"]).encode("ascii")))
    report.events = state.size
    longest = max([*database.roots_by_size, *external.roots_by_size], default=0)
    if state.size < longest:
        raise VerificationFailure(
            "truncated",
            f"the log has {state.size} events but a checkpoint covers {longest}: seqs {state.size + 1}..{longest} "
            "were deleted",
            seq=state.size + 1,
        )
    _quarantine_check(recorded, report)
    _heartbeat_check(report, state.size)
    return report

"""Verifying the live database against its checkpoints and the external checkpoint folder.

Replays every event from genesis with the same code as the offline verifier and checks: the chain
and the department chains, the stored hash and filter columns against each record, every
checkpoint's signature and chain (in the database and in the folder), that the folder holds no
checkpoint the database lacks, that every checkpoint's roots match the log's prefix of its size,
and that the log is not shorter than any checkpoint.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from audit.conf import audit_checkpoint_folder, audit_trusted_keys
from audit.integrity.errors import VerificationFailure
from audit.integrity.keys import VerifierKey
from audit.integrity.replay import ReplayState
from audit.integrity.store import ChainSummary, CheckpointFolder, checkpoint_chain_verify
from audit.models import AuditCheckpoint
from audit.services import audit_time_format

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

    def summary(self) -> str:
        lines = [
            f"OK: {self.events} events, {self.checkpoints} checkpoints in the database and "
            f"{self.folder_checkpoints} in the external folder verified"
        ]
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
        report.warnings.append(f"{missing} checkpoints are not in the external folder yet (the next publish writes them)")


def _prefix_check(state: ReplayState, database: ChainSummary, folder: ChainSummary) -> None:
    for summary in (database, folder):
        known = summary.roots_by_size.get(state.size)
        if known is not None and state.compact.root() != known[0]:
            raise VerificationFailure(
                "rewritten",
                f"the first {state.size} events do not reproduce the root of checkpoint #{known[1]}: the log was "
                "rewritten after that checkpoint was published",
                seq=state.size or None,
            )
        departments = summary.departments_by_size.get(state.size)
        if departments is not None and departments != (len(state.heads), state.departments_root()):
            raise VerificationFailure(
                "rewritten",
                f"the department heads after {state.size} events do not match the checkpoints of that size",
                seq=state.size or None,
            )


def audit_log_verify(*, folder: CheckpointFolder | None = None, keys: list[VerifierKey] | None = None) -> LiveReport:
    """Raises ``VerificationFailure`` naming the first defect."""
    folder = folder or audit_checkpoint_folder()
    keys = keys if keys is not None else audit_trusted_keys()
    report = LiveReport()
    database = checkpoint_chain_verify(_database_notes(), keys)
    external = checkpoint_chain_verify(folder.notes(), keys) if folder.numbers() else ChainSummary()
    _cross_check(database, external, report)
    report.checkpoints, report.folder_checkpoints = database.count, external.count
    state = ReplayState.empty()
    _prefix_check(state, database, external)
    for row in _rows():
        event = state.append(str(row["record"]).encode("ascii"))
        _columns_check(row, event.hash_hex)
        _prefix_check(state, database, external)
    report.events = state.size
    longest = max([*database.roots_by_size, *external.roots_by_size], default=0)
    if state.size < longest:
        raise VerificationFailure(
            "truncated",
            f"the log has {state.size} events but a checkpoint covers {longest}: seqs {state.size + 1}..{longest} "
            "were deleted",
            seq=state.size + 1,
        )
    return report

"""Publishing signed checkpoints of the audit log (every minute, and on demand).

A checkpoint resumes from the previous one (its compact range and department heads, both checked
against the previous signed roots), replays and checks the events added since, signs the new size,
roots and head with the key from the configuration, stores the checkpoint in the database and,
once committed, writes it to the external checkpoint folder with its proof file (its compact range
and the subtrees that extend the previous checkpoint's tree to it). It refuses to sign anything it
cannot verify, and refuses to run when the external folder is ahead of the database (a rollback).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from django.db import connection, transaction

from audit.conf import audit_checkpoint_folder, audit_origin, audit_signing_key, audit_trusted_keys
from audit.integrity.chain import record_parse_or_fail
from audit.integrity.checkpoint import ZERO_HASH, Checkpoint, checkpoint_sign, checkpoint_verify, note_hash
from audit.integrity.departments import DepartmentHead, heads_from_json, heads_to_json
from audit.integrity.errors import VerificationFailure
from audit.integrity.merkle import CompactRange, subtrees_covering
from audit.integrity.replay import ReplayState
from audit.integrity.store import CheckpointFolder, CheckpointProof
from audit.models import AuditCheckpoint, AuditEvent
from audit.proofs import gap_nodes
from audit.services import audit_time_format, chain_lock
from kernel.clock import clock_now

CHECKPOINT_LOCK_ID = 0x6770_7561_7564_0002
NODE_LEVEL_STEP = 8  # store subtree roots of 2**8, 2**16, ... events
READ_CHUNK = 5000
NODE_BATCH = 1000


class AuditIntegrityError(Exception):
    """The log, its checkpoints or the external store disagree; nothing was signed."""

    def __init__(self, failure: VerificationFailure) -> None:
        super().__init__(str(failure))
        self.failure = failure


def events_after(*, after: int, upto: int, chunk: int = READ_CHUNK) -> Iterator[tuple[int, str, str]]:
    """``(seq, hash, record)`` of events ``after < seq <= upto`` in order, a chunk at a time."""
    position = after
    while position < upto:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT seq, hash, record FROM audit_event WHERE seq > %s AND seq <= %s ORDER BY seq LIMIT %s",
                [position, upto, chunk],
            )
            rows = cursor.fetchall()
        if not rows:
            return
        yield from rows
        position = rows[-1][0]


def checkpoint_heads(checkpoint: AuditCheckpoint) -> dict[int, DepartmentHead]:
    """The department heads as of ``checkpoint`` (stored with the latest checkpoint that changed them)."""
    stored = (
        AuditCheckpoint.objects.filter(number__lte=checkpoint.number).exclude(departments="")
        .order_by("-number").values_list("departments", flat=True).first()
    )
    return heads_from_json(json.loads(stored)) if stored else {}


@dataclass
class _NodeWriter:
    pending: list[tuple[int, int, str]]
    wanted: dict[tuple[int, int], bytes | None]  # the extension's subtrees, (level, index), filled as they complete

    def __call__(self, level: int, position: int, hash_: bytes) -> None:
        if (level, position) in self.wanted:
            self.wanted[(level, position)] = hash_
        if level % NODE_LEVEL_STEP == 0:
            self.pending.append((level, position, hash_.hex()))
            if len(self.pending) >= NODE_BATCH:
                self.flush()

    def flush(self) -> None:
        if self.pending:
            with connection.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO audit_merkle_node (level, position, hash) VALUES (%s, %s, %s)", self.pending
                )
            self.pending = []


def checkpoint_resume(latest: AuditCheckpoint | None) -> tuple[ReplayState, Checkpoint | None]:
    if latest is None:
        return ReplayState.empty(), None
    signed = checkpoint_verify(latest.note, audit_trusted_keys())
    compact = CompactRange.from_frontier(signed.size, [bytes.fromhex(value) for value in json.loads(latest.frontier)])
    if latest.size != signed.size or compact.root() != signed.root:
        raise VerificationFailure("altered", f"the stored state of {signed.describe()} does not match its signed root")
    heads = checkpoint_heads(latest)
    state = ReplayState(compact=compact, last=None, heads=heads)
    state.quarantines, state.quarantine_head = signed.quarantines, signed.quarantine_head
    if len(heads) != signed.departments_size or state.departments_root() != signed.departments_root:
        raise VerificationFailure("altered", f"the stored department heads of {signed.describe()} do not match it")
    if signed.size:
        row = AuditEvent.objects.filter(seq=signed.size).values_list("record", flat=True).first()
        if row is None:
            raise VerificationFailure(
                "truncated", f"event seq {signed.size}, the head of {signed.describe()}, is gone", seq=signed.size
            )
        state.last = record_parse_or_fail(row.encode("ascii", "replace"), expected_seq=signed.size)
        if state.last.hash != signed.head:
            raise VerificationFailure(
                "altered", f"seq {signed.size} no longer matches the head of {signed.describe()}", seq=signed.size
            )
    return state, signed


def _store_check(folder: CheckpointFolder, latest: AuditCheckpoint | None) -> None:
    """Refuse to go on when the external folder knows a checkpoint the database does not."""
    numbers = folder.numbers()
    if not numbers:
        return
    newest = numbers[-1]
    database_number = latest.number if latest is not None else 0
    if newest > database_number:
        raise VerificationFailure(
            "rollback",
            f"the external checkpoint folder holds checkpoint #{newest} but the database's latest is "
            f"#{database_number}: the database was rolled back or truncated",
        )
    if latest is not None and newest == database_number and folder.read(newest) != latest.note:
        raise VerificationFailure("split-view", f"the external checkpoint #{newest} differs from the database's")


def checkpoint_proof(row: AuditCheckpoint, previous_size: int) -> CheckpointProof:
    """The proof file of a stored checkpoint, from its compact range and the stored subtrees."""
    return CheckpointProof(
        number=row.number, size=row.size, previous_size=previous_size,
        frontier=tuple(bytes.fromhex(value) for value in json.loads(row.frontier)),
        extension=tuple(gap_nodes(previous_size, row.size)),
    )


def checkpoint_backfill(folder: CheckpointFolder | None = None) -> int:
    """Write to the external folder the checkpoints it misses (after a failed write), with their
    proof files. Returns the count."""
    folder = folder or audit_checkpoint_folder()
    numbers = folder.numbers()
    newest = numbers[-1] if numbers else 0
    previous_size = AuditCheckpoint.objects.filter(number=newest).values_list("size", flat=True).first() or 0
    written = 0
    for row in AuditCheckpoint.objects.filter(number__gt=newest).order_by("number").iterator(chunk_size=100):
        folder.write(row.number, row.note, checkpoint_proof(row, previous_size))
        previous_size = row.size
        written += 1
    return written


def checkpoint_publish() -> AuditCheckpoint:
    """Sign and store a checkpoint of everything committed so far (a heartbeat when nothing changed)."""
    key = audit_signing_key()
    folder = audit_checkpoint_folder()
    try:
        with transaction.atomic():
            chain_lock(connection, CHECKPOINT_LOCK_ID)
            latest = AuditCheckpoint.objects.order_by("-number").first()
            _store_check(folder, latest)
            row, checkpoint, proof = _next_checkpoint(latest)
            row.note = note = checkpoint_sign(checkpoint, key)
            row.save(force_insert=True)
            transaction.on_commit(lambda: folder.write(checkpoint.number, note, proof))
    except VerificationFailure as failure:
        raise AuditIntegrityError(failure) from None
    return row


def _next_checkpoint(latest: AuditCheckpoint | None) -> tuple[AuditCheckpoint, Checkpoint, CheckpointProof]:
    state, previous = checkpoint_resume(latest)
    upto = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
    if upto < state.size:
        raise VerificationFailure(
            "truncated", f"the log has {upto} events but the previous checkpoint covers {state.size}", seq=upto + 1
        )
    previous_size = state.size
    extension = list(subtrees_covering(previous_size, upto))
    nodes = _NodeWriter(pending=[], wanted=dict.fromkeys(extension))
    for seq, stored_hash, record in events_after(after=state.size, upto=upto):
        event = state.append(record.encode("ascii", "replace"), sink=nodes)  # not ASCII: not a record of ours
        if event.hash_hex != stored_hash:
            raise VerificationFailure("altered", f"the stored hash of seq {seq} does not match its record", seq=seq)
        if (0, seq - 1) in nodes.wanted:
            nodes.wanted[(0, seq - 1)] = event.hash
    nodes.flush()
    times = [audit_time_format(clock_now())]
    times += [previous.time] if previous else []
    times += [state.last.occurred_at] if state.last else []
    checkpoint = Checkpoint(
        origin=audit_origin(), size=state.size, root=state.compact.root(), head=state.head,
        departments_size=len(state.heads), departments_root=state.departments_root(),
        number=previous.number + 1 if previous else 1,
        previous=note_hash(latest.note) if latest is not None else ZERO_HASH,
        time=max(times), quarantines=state.quarantines, quarantine_head=state.quarantine_head,
    )
    proof = CheckpointProof(
        number=checkpoint.number, size=checkpoint.size, previous_size=previous_size,
        frontier=tuple(state.compact.frontier),
        extension=tuple((level, _completed(nodes.wanted[(level, index)])) for level, index in extension),
    )
    row = AuditCheckpoint(
        number=checkpoint.number, size=checkpoint.size, root=checkpoint.root.hex(), created_at=clock_now(),
        note="", frontier=json.dumps([value.hex() for value in state.compact.frontier]),
        departments=json.dumps(heads_to_json(state.heads)) if state.heads_changed or latest is None else "",
    )
    return row, checkpoint, proof


def _completed(hash_: bytes | None) -> bytes:
    assert hash_ is not None, "every subtree of the extension completes while the new events are replayed"
    return hash_

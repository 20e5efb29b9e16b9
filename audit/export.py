"""Streaming exports of the audit log: JSON Lines, CSV, and verifiable bundles.

Every export reads a fixed range of sequence numbers a chunk at a time (keyset on ``seq``), so
memory stays constant however many events are exported and events appended meanwhile are not
mixed in. See ``audit.integrity.bundle`` for the bundle format and what it proves.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connection

from audit.checkpoints import checkpoint_heads, checkpoint_publish
from audit.integrity.bundle import context_line, departments_line, end_line, header_line, nodes_line, quarantine_line
from audit.integrity.canonical import leaf_hash
from audit.integrity.departments import heads_proof
from audit.integrity.quarantine import QUARANTINE_ACTION
from audit.models import AuditCheckpoint, AuditEvent
from audit.proofs import gap_nodes
from audit.selectors import AuditFilters, audit_seq_bounds
from audit.services import audit_time_format
from kernel.clock import clock_now
from kernel.times import COMPACT_SECOND_Z

CHUNK = 5000
COPY_BATCH = 1 << 20
CSV_FLUSH = 500
OUTPUTS = ("jsonl", "csv", "bundle")
CONTENT_TYPES = {"jsonl": "application/x-ndjson", "csv": "text/csv; charset=utf-8", "bundle": "application/x-ndjson"}
CSV_COLUMNS = (
    "seq", "occurred_at", "actor_id", "actor_username", "action", "action_number", "target_type", "target_id",
    "department_id", "department_seq", "outcome", "before", "after", "details", "request_id", "source_ip",
    "user_agent", "nonce", "prev_hash", "department_prev_hash", "hash",
)
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class _Selection:
    """Which rows to read: ``first..last`` plus, for bundles, boundary events outside the range."""

    first: int
    last: int
    department_ids: tuple[int, ...] | None
    actors: tuple[str, ...] | None
    actions: tuple[str, ...] | None
    context: frozenset[int] = frozenset()

    @property
    def low(self) -> int:
        return min([self.first, *self.context])

    @property
    def high(self) -> int:
        return max([self.last, *self.context])


def _where(selection: _Selection) -> tuple[str, list[Any]]:
    clauses: list[str] = ["seq >= %s", "seq <= %s"]
    params: list[Any] = [selection.low, selection.high]
    if selection.context:
        marks = ", ".join(["%s"] * len(selection.context))
        clauses.append(f"((seq >= %s AND seq <= %s) OR seq IN ({marks}))")
        params += [selection.first, selection.last, *sorted(selection.context)]
    filters: tuple[tuple[str, tuple[Any, ...] | None], ...] = (
        ("department_id", selection.department_ids), ("actor_username", selection.actors), ("action", selection.actions)
    )
    for column, values in filters:
        if values is not None:
            clauses.append(f"{column} IN ({', '.join(['%s'] * len(values))})" if values else "1 = 0")
            params += list(values)
    return " AND ".join(clauses), params


def _rows(selection: _Selection) -> Iterator[list[tuple[int, str]]]:
    """Chunks of ``(seq, record)`` in order."""
    if selection.high < selection.low:
        return
    where, params = _where(selection)
    position = selection.low - 1
    while True:
        with connection.cursor() as cursor:
            cursor.execute(  # the WHERE clause is built from fixed fragments and %s placeholders only
                f"SELECT seq, record FROM audit_event WHERE {where} AND seq > %s ORDER BY seq LIMIT %s",  # noqa: S608
                [*params, position, CHUNK],
            )
            rows = cursor.fetchall()
        if not rows:
            return
        yield rows
        position = rows[-1][0]


def _upto_now() -> int:
    return AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0


def _plain_selection(filters: AuditFilters, upto: int) -> _Selection:
    first, last = audit_seq_bounds(filters=filters, upto=upto)
    departments = tuple(sorted(filters.department_ids)) if filters.department_ids is not None else None
    return _Selection(first=first, last=last, department_ids=departments, actors=filters.actors, actions=filters.actions)


def _copied_records(selection: _Selection) -> Iterator[bytes]:
    """The selected records, newline-terminated, in blocks of about a megabyte, streamed by
    PostgreSQL's COPY. CSV mode with a delimiter and quote that never occur in a record (records are
    printable ASCII) writes every record byte for byte, unquoted and unescaped."""
    where, params = _where(selection)
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    batch: list[bytes] = []
    size = 0
    query = (  # the WHERE clause is built from fixed fragments and %s placeholders only
        f"COPY (SELECT record FROM audit_event WHERE {where} ORDER BY seq) "  # noqa: S608
        "TO STDOUT (FORMAT csv, DELIMITER E'\\x02', QUOTE E'\\x01')"
    )
    with raw.cursor() as cursor, cursor.copy(query, params) as copy:
        for block in copy:
            data = bytes(block)
            batch.append(data)
            size += len(data)
            if size >= COPY_BATCH:
                yield b"".join(batch)
                batch.clear()
                size = 0
    if batch:
        yield b"".join(batch)


def _record_blocks(selection: _Selection) -> Iterator[bytes]:
    """The selected records, newline-terminated, a block at a time, in constant memory."""
    if selection.high < selection.low:
        return
    if connection.vendor == "postgresql":
        yield from _copied_records(selection)
        return
    for rows in _rows(selection):
        yield ("\n".join(record for _, record in rows) + "\n").encode("utf-8")  # as stored (records are ASCII)


def audit_export_jsonl(*, filters: AuditFilters, upto: int | None = None) -> Iterator[bytes]:
    """The selected records, one per line, exactly as stored and hashed."""
    yield from _record_blocks(_plain_selection(filters, _upto_now() if upto is None else upto))


def csv_cell(value: Any) -> Any:
    """A value as a CSV cell: JSON for structures, a formula-like text defused (a leading quote)."""
    if isinstance(value, dict | list):
        value = json.dumps(value, sort_keys=True, ensure_ascii=True)
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value  # never let a spreadsheet evaluate a logged value
    return value


def audit_export_csv(*, filters: AuditFilters, upto: int | None = None) -> Iterator[bytes]:
    """One row per event with its hash; JSON columns as JSON text; formula-like cells defused."""
    selection = _plain_selection(filters, _upto_now() if upto is None else upto)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for rows in _rows(selection):
        for index, (_, record) in enumerate(rows, start=1):
            fields = json.loads(record)
            fields["hash"] = leaf_hash(record.encode("ascii")).hex()
            writer.writerow([csv_cell(fields.get(column)) for column in CSV_COLUMNS])
            if index % CSV_FLUSH == 0:
                yield buffer.getvalue().encode("utf-8")
                buffer.seek(0)
                buffer.truncate()
    if buffer.tell():
        yield buffer.getvalue().encode("utf-8")


def checkpoint_for_export() -> AuditCheckpoint:
    """The latest checkpoint, publishing one first when events were added since."""
    latest = AuditCheckpoint.objects.order_by("-number").first()
    if latest is None or latest.size < _upto_now():
        return checkpoint_publish()
    return latest


def _bundle_selection(filters: AuditFilters, upto: int) -> _Selection:
    selection = _plain_selection(filters, upto)
    if not filters.scope().proves_completeness:
        return selection
    first, last = selection.first, selection.last
    context: set[int] = set()
    if filters.department_ids is None:
        if filters.time_from is not None and first > 1:
            context.add(first - 1)
        if filters.time_to is not None and last < upto:
            context.add(last + 1)
        return _Selection(first=first, last=last, department_ids=None, actors=None, actions=None,
                          context=frozenset(context))
    for department_id in sorted(filters.department_ids):
        events = AuditEvent.objects.filter(department_id=department_id)
        if filters.time_from is not None:
            before = events.filter(seq__lt=first).order_by("-seq").values_list("seq", flat=True).first()
            if before is not None:
                context.add(before)
        if filters.time_to is not None:
            after = events.filter(seq__gt=last, seq__lte=upto).order_by("seq").values_list("seq", flat=True).first()
            if after is not None:
                context.add(after)
    return _Selection(first=first, last=last, department_ids=selection.department_ids, actors=None, actions=None,
                      context=frozenset(context))


def _disclosed(upto: int) -> dict[int, str]:
    """The ``audit.quarantined`` events up to ``upto``, which every bundle reveals."""
    return dict(
        AuditEvent.objects.filter(action=QUARANTINE_ACTION, seq__lte=upto).order_by("seq").values_list("seq", "record")
    )


def _gap_lines(start: int, end: int, disclosed: dict[int, str]) -> list[bytes]:
    """Proof nodes covering leaves ``[start, end)``, with the quarantine events among them revealed."""
    lines: list[bytes] = []
    for seq in sorted(seq for seq in disclosed if start < seq <= end):
        if seq - 1 > start:
            lines.append(nodes_line(start, gap_nodes(start, seq - 1)))
        lines.append(quarantine_line(disclosed[seq].encode("ascii")))
        start = seq
    if end > start:
        lines.append(nodes_line(start, gap_nodes(start, end)))
    return lines


def _bundle_rows(selection: _Selection, disclosed: dict[int, str]) -> Generator[bytes, None, tuple[int, int, int]]:
    """Revealed events (and context) with proof nodes for the gaps; returns (position, events, context)."""
    position, events, context = 0, 0, 0
    for rows in _rows(selection):
        lines: list[bytes] = []
        for seq, record in rows:
            if seq - 1 > position:
                lines.extend(_gap_lines(position, seq - 1, disclosed))
            if seq in selection.context:
                lines.append(context_line(record.encode("ascii")))
                context += 1
            else:
                lines.append(record.encode("ascii"))
                events += 1
            position = seq
        yield b"\n".join(lines) + b"\n"
    return position, events, context


def _bundle_range(selection: _Selection, disclosed: dict[int, str]) -> Generator[bytes, None, tuple[int, int, int]]:
    """The same for a contiguous range (no department, actor or action filter), whose only context
    events are its two ends: the middle is streamed like a JSON Lines export."""
    low, high, ends = selection.low, selection.high, selection.context
    if high < low:
        return 0, 0, 0
    if low > 1:
        yield b"\n".join(_gap_lines(0, low - 1, disclosed)) + b"\n"
    records = dict(AuditEvent.objects.filter(seq__in=sorted(ends)).values_list("seq", "record"))
    first = low + 1 if low in ends else low
    last = high - 1 if high in ends and high != low else high
    if low in ends:
        yield context_line(records[low].encode("ascii")) + b"\n"
    if first <= last:
        yield from _record_blocks(dataclasses.replace(selection, first=first, last=last, context=frozenset()))
    if high in ends and high != low:
        yield context_line(records[high].encode("ascii")) + b"\n"
    return high, max(0, last - first + 1), len(ends)


def audit_export_bundle(*, filters: AuditFilters, checkpoint: AuditCheckpoint) -> Iterator[bytes]:
    """The selected records with the latest checkpoint and the proofs (``python -m audit.verify``)."""
    scope = filters.scope()
    upto = checkpoint.size
    selection = _bundle_selection(filters, upto)
    head = [header_line(checkpoint_note=checkpoint.note, scope=scope, exported_at=audit_time_format(clock_now()))]
    if scope.departments is not None:
        head.append(departments_line(heads_proof(checkpoint_heads(checkpoint), scope.departments)))
    yield b"\n".join(head) + b"\n"
    contiguous = selection.department_ids is None and selection.actors is None and selection.actions is None
    disclosed = _disclosed(upto)
    body = _bundle_range(selection, disclosed) if contiguous else _bundle_rows(selection, disclosed)
    position, events, context = yield from body
    tail = _gap_lines(position, upto, disclosed)
    tail.append(end_line(events=events, context=context))
    yield b"\n".join(tail) + b"\n"


def audit_export(*, filters: AuditFilters, output: str, checkpoint: AuditCheckpoint | None = None) -> Iterator[bytes]:
    if output == "jsonl":
        return audit_export_jsonl(filters=filters)
    if output == "csv":
        return audit_export_csv(filters=filters)
    if output == "bundle":
        return audit_export_bundle(filters=filters, checkpoint=checkpoint or checkpoint_for_export())
    raise ValueError(f"unknown export output {output!r}; choose one of {', '.join(OUTPUTS)}")


def export_filename(output: str, *, now: Any = None) -> str:
    stamp = (now or clock_now()).strftime(COMPACT_SECOND_Z)
    suffix = {"jsonl": "jsonl", "csv": "csv", "bundle": "bundle.jsonl"}[output]
    return f"audit-{stamp}.{suffix}"

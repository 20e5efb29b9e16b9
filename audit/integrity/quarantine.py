"""Quarantines: how the log says that rows were moved out of its chain, and how a verifier reads it.

When the application's database role appends a row that does not verify (a wrong hash, a broken
link, an unreadable record), no checkpoint can be signed until an operator moves that row, and
every row appended after it, out of the chain (``manage.py audit_recover``). Only rows that no
checkpoint covers can be moved: what a checkpoint signed is never touched. The rows are kept, as
they were, in the quarantine tables, and the log records the move as an ``audit.quarantined``
event at the place of the first moved row, followed by ``audit.reanchored``. Every later checkpoint
counts the ``audit.quarantined`` events (its ``quarantines`` line), and every bundle reveals them,
whatever its scope, so that an auditor always sees that a quarantine happened and what it covered.

``quarantine_digest`` is the SHA-256 that the event records over the moved rows: whoever can read
the quarantine tables can check that they still hold exactly what was moved.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from audit.integrity.canonical import canonical_json

QUARANTINE_ACTION = "audit.quarantined"
REANCHOR_ACTION = "audit.reanchored"
ROW_FIELDS = (
    "seq", "occurred_at", "actor_id", "actor_username", "action", "target_type", "target_id", "department_id",
    "department_seq", "outcome", "request_id", "hash", "record",
)
"""The columns of a quarantined row, in the order the digest covers them."""


def quarantine_digest(rows: Iterable[Sequence[Any]]) -> str:
    """SHA-256 over the quarantined rows in ``seq`` order, each the canonical JSON list of its
    ``ROW_FIELDS`` (``occurred_at`` as a canonical UTC timestamp) followed by a newline."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(canonical_json(list(row)) + b"\n")
    return digest.hexdigest()


def quarantine_describe(record: bytes) -> str:
    """One line for a verifier's report, from an ``audit.quarantined`` event's record."""
    try:
        event = json.loads(record)
        details = event.get("details") or {}
        seq, when = event.get("seq"), event.get("occurred_at")
    except (ValueError, AttributeError):
        return "a quarantine whose record cannot be read"
    if not isinstance(details, dict):
        details = {}
    failure: dict[str, Any] = details["failure"] if isinstance(details.get("failure"), dict) else {}
    checkpoint: dict[str, Any] = details["checkpoint"] if isinstance(details.get("checkpoint"), dict) else {}
    first, last, count = details.get("from_seq"), details.get("to_seq"), details.get("events")
    parts = [
        f"quarantine #{details.get('quarantine', '?')} recorded at seq {seq} ({when}): {count} rows first appended "
        f"as seqs {first}..{last} were moved out of the chain (digest {details.get('digest', '?')})",
        f"no checkpoint covered them (the latest was #{checkpoint.get('number', '?')}, size "
        f"{checkpoint.get('size', '?')})",
        f"first failure: {failure.get('kind', '?')} at seq {failure.get('seq', '?')}",
        f"reason: {details.get('reason', '?')!r} (operator {details.get('operator', '?')!r})",
        f"events from seq {seq} on were appended after the chain was re-anchored on seq {first - 1 if isinstance(first, int) else '?'}",
    ]
    return "; ".join(parts)

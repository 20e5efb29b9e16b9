"""Each node's ledger is a hash chain: a row's hash is SHA-256 over its predecessor's hash and its
own canonical record, so changing, removing or reordering any row breaks every hash after it.

Pure Python, no Django (``kernel.times`` is plain Python too): the portal writes with it and the offline verifier (``custody.verify``)
checks with it, so both read the same definition.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from kernel.times import ISO_MICROSECOND_Z

GENESIS = "0" * 64
# The fields a row's hash covers, in this order; ``id`` (the table's own numbering) is not one.
LEDGER_FIELDS: tuple[str, ...] = (
    "node_id", "chain_seq", "kind", "recorded_at", "cluster", "node", "gpu_uuid", "device_id", "resource",
    "sharing", "namespace", "pod", "pod_uid", "container", "project_id", "department_id", "allocation_id",
    "attribution", "started_at", "start_observed", "ended_at", "end_observed", "gone_at", "confidence",
    "gap_cause", "opened_seq", "prev_hash",
)
TIME_FIELDS = frozenset({"recorded_at", "started_at", "ended_at", "gone_at"})


def time_text(moment: datetime.datetime | None) -> str | None:
    """UTC with microseconds and a Z: the one form a time takes in a record and an export."""
    if moment is None:
        return None
    return moment.astimezone(datetime.UTC).strftime(ISO_MICROSECOND_Z)


def record_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """The hashed fields of a row (model values or an exported line) in their canonical types."""
    record: dict[str, Any] = {}
    for field in LEDGER_FIELDS:
        value = row.get(field)
        if field in TIME_FIELDS and isinstance(value, datetime.datetime):
            value = time_text(value)
        record[field] = value
    return record


def canonical(record: Mapping[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def row_hash(row: Mapping[str, Any]) -> str:
    """The hash of a row whose ``prev_hash`` is set: SHA-256(prev_hash || canonical record)."""
    record = record_of(row)
    return hashlib.sha256(str(record["prev_hash"]).encode("ascii") + canonical(record)).hexdigest()

"""Canonical serialisation of audit records and the hash that chains and commits them.

A record is a flat JSON object serialised with sorted keys, no whitespace and ASCII only (every
non-ASCII and control character is a ``\\u`` escape), and without floats that are not finite. The
serialised bytes are what is stored, exported and hashed; verifiers hash the bytes as given and
never need to re-serialise.

The event hash is the RFC 6962 leaf hash ``SHA-256(0x00 || record bytes)``. The record carries the
previous event's hash (``prev_hash``), so the hash covers both the record and its predecessor, and
the same value is the event's leaf in the Merkle tree.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, NamedTuple

RECORD_VERSION = 1
GENESIS_HASH = "0" * 64
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # fixed width, so string order is time order


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


class EventFacts(NamedTuple):
    """The fields of a record that the chain, the Merkle tree and completeness rely on."""

    seq: int
    prev_hash: str
    occurred_at: str
    department_id: int | None
    department_seq: int | None
    department_prev_hash: str | None
    actor_username: str
    actor_id: int | None
    action: str
    hash: bytes

    @property
    def hash_hex(self) -> str:
        return self.hash.hex()


_DECODE = json.JSONDecoder().decode
_HEX64 = re.compile(r"[0-9a-f]{64}\Z").match
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z\Z").match
_SHA256 = hashlib.sha256


def parse_record(data: bytes) -> EventFacts:
    """Parse and type-check a record; raises ``ValueError`` naming the problem.

    This runs once per event in every verification, so it is written for speed: type errors
    surface as ``TypeError`` from the checks themselves and are reported as malformed records.
    """
    try:
        record = _DECODE(data.decode("ascii"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"not valid JSON ({error})") from None
    try:
        if record["v"] != RECORD_VERSION:
            raise ValueError(f"unknown record version {record['v']!r}")
        seq, prev_hash, occurred_at = record["seq"], record["prev_hash"], record["occurred_at"]
        department_id, department_seq = record["department_id"], record["department_seq"]
        department_prev_hash, actor_id = record["department_prev_hash"], record["actor_id"]
        actor_username, action = record["actor_username"], record["action"]
        if type(seq) is not int or seq < 1:
            raise ValueError("seq is not a positive integer")
        if not _HEX64(prev_hash):
            raise ValueError("prev_hash is not 64 hex digits")
        if not _TIME(occurred_at):
            raise ValueError("occurred_at is not a UTC timestamp with microseconds")
        if department_id is None:
            if department_seq is not None or department_prev_hash is not None:
                raise ValueError("department_seq without department_id")
        elif type(department_id) is not int or type(department_seq) is not int or department_seq < 1 or not _HEX64(
            department_prev_hash
        ):
            raise ValueError("department_id, department_seq and department_prev_hash are inconsistent")
        if actor_id is not None and type(actor_id) is not int:
            raise ValueError("actor_id is not an integer")
        if type(actor_username) is not str or type(action) is not str:
            raise ValueError("actor_username and action must be strings")
    except KeyError as error:
        raise ValueError(f"field {error} is missing") from None
    except TypeError:
        raise ValueError("a field has the wrong type") from None
    return EventFacts(
        seq, prev_hash, occurred_at, department_id, department_seq, department_prev_hash, actor_username, actor_id,
        action, _SHA256(b"\x00" + data).digest(),
    )


def record_fields(
    *,
    seq: int,
    prev_hash: str,
    occurred_at: str,
    nonce: str,
    actor_id: int | None,
    actor_username: str,
    action: str,
    action_number: int,
    target_type: str,
    target_id: str,
    department_id: int | None,
    department_seq: int | None,
    department_prev_hash: str | None,
    outcome: str,
    before: dict[str, Any],
    after: dict[str, Any],
    details: dict[str, Any],
    request_id: str,
    source_ip: str | None,
    user_agent: str,
) -> dict[str, Any]:
    """The record of one event (version 1). Values must already be JSON-safe and scrubbed."""
    return {
        "v": RECORD_VERSION, "seq": seq, "prev_hash": prev_hash, "occurred_at": occurred_at, "nonce": nonce,
        "actor_id": actor_id, "actor_username": actor_username, "action": action, "action_number": action_number,
        "target_type": target_type, "target_id": target_id, "department_id": department_id,
        "department_seq": department_seq, "department_prev_hash": department_prev_hash, "outcome": outcome,
        "before": before, "after": after, "details": details, "request_id": request_id, "source_ip": source_ip,
        "user_agent": user_agent,
    }


CHAIN_FIELDS = ("department_prev_hash", "department_seq", "occurred_at", "prev_hash", "seq")  # in key order


def record_template(**fields: Any) -> tuple[str, ...]:
    """The canonical record of an event before it is chained: the six pieces of text between which
    the JSON values of the five fields assigned under the chain lock go (``CHAIN_FIELDS``, in key
    order). ``fields`` are ``record_fields``' other arguments. ``record_fill`` (and, on PostgreSQL,
    the ``audit_event_append`` function) joins them; the result is exactly ``canonical_json`` of the
    whole record, because a canonical object is its sorted members joined by commas."""
    record = record_fields(seq=1, prev_hash=GENESIS_HASH, occurred_at="", department_seq=None,
                           department_prev_hash=None, **fields)
    pieces: list[str] = []
    current, members = "{", 0
    group: dict[str, Any] = {}
    for key in sorted(record):  # the members between two chain fields serialised at once: one call, not one a member
        if key not in CHAIN_FIELDS:
            group[key] = record[key]
            continue
        if group:
            current += ("," if members else "") + canonical_json(group).decode("ascii")[1:-1]
            members, group = members + len(group), {}
        pieces.append(current + ("," if members else "") + canonical_json(key).decode("ascii") + ":")
        current, members = "", members + 1
    if group:
        current += "," + canonical_json(group).decode("ascii")[1:-1]
    pieces.append(current + "}")
    return tuple(pieces)


def record_fill(
    template: tuple[str, ...], *, seq: int, prev_hash: str, occurred_at: str, department_seq: int | None,
    department_prev_hash: str | None,
) -> bytes:
    """The record's canonical bytes: ``template`` with the chain fields put in."""
    values = (department_prev_hash, department_seq, occurred_at, prev_hash, seq)
    text = template[0]
    for value, piece in zip(values, template[1:], strict=True):
        text += canonical_json(value).decode("ascii") + piece
    return text.encode("ascii")

"""Subtree hashes of the event tree for export proofs, from stored nodes and event hashes.

Roots of aligned subtrees at levels 8, 16, 24, ... are stored by checkpoint publishing
(``audit_merkle_node``); any other subtree is folded from at most 128 hashes one stored level
below (or from event hashes), so covering a gap costs a handful of small index reads however
large the log is.
"""

from __future__ import annotations

from django.db import connection

from audit.integrity.merkle import reference_root, subtrees_covering

NODE_LEVEL_STEP = 8


def _leaf_hashes(start: int, count: int) -> list[bytes]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT seq, hash FROM audit_event WHERE seq > %s AND seq <= %s ORDER BY seq", [start, start + count]
        )
        rows = cursor.fetchall()
    if len(rows) != count or (rows and (rows[0][0] != start + 1 or rows[-1][0] != start + count)):
        raise LookupError(f"events {start + 1}..{start + count} are not all in the log")
    return [bytes.fromhex(hash_) for _, hash_ in rows]


def _stored_nodes(level: int, start: int, count: int) -> dict[int, bytes]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT position, hash FROM audit_merkle_node WHERE level = %s AND position >= %s AND position < %s",
            [level, start, start + count],
        )
        return {position: bytes.fromhex(hash_) for position, hash_ in cursor.fetchall()}


def subtree_hash(level: int, position: int) -> bytes:
    """Root of the perfect subtree of ``2**level`` events starting at leaf ``position << level``."""
    if level == 0:
        return _leaf_hashes(position, 1)[0]
    if level % NODE_LEVEL_STEP == 0:
        stored = _stored_nodes(level, position, 1)
        if position in stored:
            return stored[position]
        base = level - NODE_LEVEL_STEP
    else:
        base = level - level % NODE_LEVEL_STEP
    span = 1 << (level - base)
    first = position << (level - base)
    if base == 0:
        hashes = _leaf_hashes(first, span)
    else:
        stored = _stored_nodes(base, first, span)
        hashes = [stored[index] if index in stored else subtree_hash(base, index) for index in range(first, first + span)]
    return reference_root(hashes)


def gap_nodes(start: int, end: int) -> list[tuple[int, bytes]]:
    """``(level, hash)`` of the subtrees that cover leaves ``[start, end)``, left to right."""
    return [(level, subtree_hash(level, position)) for level, position in subtrees_covering(start, end)]

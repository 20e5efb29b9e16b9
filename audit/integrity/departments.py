"""Department heads: per department, how many events it has and the hash of its latest one.

Every event of a department carries ``department_seq`` (1, 2, 3, ... without gaps) and the hash of
the department's previous event, so each department has its own chain inside the global one. A
checkpoint commits to all heads through the RFC 6962 root over the entries sorted by department
id. A department's export proves it is complete by revealing its head (or, for a department with
no events, the two neighbouring entries) with a proof against that root.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from audit.integrity.canonical import canonical_json, leaf_hash
from audit.integrity.merkle import CompactRange, reference_root, subtrees_covering


@dataclass(frozen=True)
class DepartmentHead:
    department_id: int
    size: int
    hash: str  # hex hash of the department's latest event

    def entry(self) -> dict[str, Any]:
        return {"department_id": self.department_id, "hash": self.hash, "size": self.size}

    def entry_bytes(self) -> bytes:
        return canonical_json(self.entry())

    @classmethod
    def from_entry(cls, entry: Any) -> DepartmentHead:
        if not isinstance(entry, dict) or set(entry) != {"department_id", "hash", "size"}:
            raise ValueError("a department head entry has exactly department_id, hash and size")
        department_id, size, hash_ = entry["department_id"], entry["size"], entry["hash"]
        if not isinstance(department_id, int) or not isinstance(size, int) or size < 1 or not isinstance(hash_, str):
            raise ValueError("a department head entry has an integer id, a positive size and a hash")
        return cls(department_id=department_id, size=size, hash=hash_)


def _sorted(heads: Mapping[int, DepartmentHead]) -> list[DepartmentHead]:
    return [heads[key] for key in sorted(heads)]


def departments_root(heads: Mapping[int, DepartmentHead]) -> bytes:
    compact = CompactRange()
    for head in _sorted(heads):
        compact.append_leaf(leaf_hash(head.entry_bytes()))
    return compact.root()


def heads_to_json(heads: Mapping[int, DepartmentHead]) -> list[list[Any]]:
    return [[head.department_id, head.size, head.hash] for head in _sorted(heads)]


def heads_from_json(rows: Iterable[Sequence[Any]]) -> dict[int, DepartmentHead]:
    heads: dict[int, DepartmentHead] = {}
    for department_id, size, hash_ in rows:
        heads[int(department_id)] = DepartmentHead(department_id=int(department_id), size=int(size), hash=str(hash_))
    return heads


def heads_proof(heads: Mapping[int, DepartmentHead], department_ids: Iterable[int]) -> list[dict[str, Any]]:
    """Proof items that reveal the heads of ``department_ids`` (or, for a department without
    events, its neighbours) and cover every other entry with subtree hashes."""
    ordered = _sorted(heads)
    ids = [head.department_id for head in ordered]
    revealed: set[int] = set()
    for department_id in department_ids:
        low, high = 0, len(ids)
        while low < high:
            middle = (low + high) // 2
            if ids[middle] < department_id:
                low = middle + 1
            else:
                high = middle
        if low < len(ids) and ids[low] == department_id:
            revealed.add(low)
        else:  # absent: reveal the neighbours that bracket it
            revealed.update(position for position in (low - 1, low) if 0 <= position < len(ids))
    leaves = [leaf_hash(head.entry_bytes()) for head in ordered]
    return list(_items(ordered, leaves, sorted(revealed)))


def _items(ordered: list[DepartmentHead], leaves: list[bytes], revealed: list[int]) -> Iterator[dict[str, Any]]:
    position = 0
    for index in [*revealed, len(ordered)]:
        for level, subtree in subtrees_covering(position, index):
            start = subtree << level
            yield {"node": [level, reference_root(leaves[start:start + (1 << level)]).hex()]}
        if index < len(ordered):
            yield {"entry": ordered[index].entry()}
        position = index + 1

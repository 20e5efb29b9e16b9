"""RFC 6962 Merkle trees: leaf and node hashes, compact ranges, and covering a gap with subtrees.

A *compact range* is the list of perfect subtree roots that cover leaves ``[0, size)``, largest
first (one per set bit of ``size``). Appending leaves, or whole aligned perfect subtrees, to it is a
binary counter; folding it from the right gives the RFC 6962 root. The same structure checks a
proof: a verifier appends the revealed leaves and the proof's subtree hashes in order and compares
the fold with the signed root.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence

from audit.integrity.canonical import leaf_hash

EMPTY_ROOT = hashlib.sha256(b"").digest()
_sha256 = hashlib.sha256

NodeSink = Callable[[int, int, bytes], None]
"""Called with (level, index, hash) for every perfect subtree completed by an append."""


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def reference_root(leaves: Sequence[bytes]) -> bytes:
    """The RFC 6962 root of leaf hashes by the definition (recursive); for tests and small trees."""
    if not leaves:
        return EMPTY_ROOT
    if len(leaves) == 1:
        return leaves[0]
    split = 1 << ((len(leaves) - 1).bit_length() - 1)
    return node_hash(reference_root(leaves[:split]), reference_root(leaves[split:]))


def subtrees_covering(start: int, end: int) -> Iterator[tuple[int, int]]:
    """The maximal aligned perfect subtrees covering leaves ``[start, end)``, left to right, as
    ``(level, index)``: the subtree covers ``[index << level, (index + 1) << level)``."""
    while start < end:
        level = (start & -start).bit_length() - 1 if start else (end - start).bit_length() - 1
        while (1 << level) > end - start:
            level -= 1
        yield level, start >> level
        start += 1 << level


class CompactRange:
    __slots__ = ("size", "_levels", "_hashes")

    def __init__(self) -> None:
        self.size = 0
        self._levels: list[int] = []
        self._hashes: list[bytes] = []

    @classmethod
    def from_frontier(cls, size: int, hashes: Sequence[bytes]) -> CompactRange:
        levels = [level for level in range(size.bit_length() - 1, -1, -1) if size >> level & 1]
        if len(levels) != len(hashes) or any(len(h) != 32 for h in hashes):
            raise ValueError(f"a compact range of size {size} needs {len(levels)} hashes, got {len(hashes)}")
        compact = cls()
        compact.size = size
        compact._levels = levels
        compact._hashes = list(hashes)
        return compact

    @property
    def frontier(self) -> list[bytes]:
        return list(self._hashes)

    def subtrees(self) -> list[tuple[int, int, bytes]]:
        """The frontier as ``(start leaf, level, hash)``, left to right."""
        items, start = [], 0
        for level, hash_ in zip(self._levels, self._hashes, strict=True):
            items.append((start, level, hash_))
            start += 1 << level
        return items

    def append_leaf(self, hash_: bytes, sink: NodeSink | None = None) -> None:
        """``append_subtree(0, hash_)``, specialised: it runs once per event in every verification."""
        levels, hashes = self._levels, self._hashes
        size = self.size + 1
        self.size = size
        level, remaining = 0, size
        while not remaining & 1:  # one merge per trailing zero bit of the new size
            levels.pop()
            hash_ = _sha256(b"\x01" + hashes.pop() + hash_).digest()
            level += 1
            remaining >>= 1
            if sink is not None:
                sink(level, (size >> level) - 1, hash_)
        levels.append(level)
        hashes.append(hash_)

    def append_record(self, data: bytes, sink: NodeSink | None = None) -> bytes:
        hash_ = leaf_hash(data)
        self.append_subtree(0, hash_, sink)
        return hash_

    def append_subtree(self, level: int, hash_: bytes, sink: NodeSink | None = None) -> None:
        """Append the root of the aligned perfect subtree of ``2**level`` leaves starting at ``size``."""
        if self.size & ((1 << level) - 1):
            raise ValueError(f"a subtree of level {level} cannot start at leaf {self.size}")
        levels, hashes = self._levels, self._hashes
        levels.append(level)
        hashes.append(hash_)
        self.size += 1 << level
        while len(levels) > 1 and levels[-1] == levels[-2]:
            merged_level = levels.pop() + 1
            right = hashes.pop()
            levels[-1] = merged_level
            hashes[-1] = node_hash(hashes[-1], right)
            if sink is not None:
                sink(merged_level, (self.size >> merged_level) - 1, hashes[-1])

    def root(self) -> bytes:
        if not self._hashes:
            return EMPTY_ROOT
        root = self._hashes[-1]
        for hash_ in reversed(self._hashes[:-1]):
            root = node_hash(hash_, root)
        return root

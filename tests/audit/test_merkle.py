"""RFC 6962 trees: the compact range against the recursive definition, and multi-leaf proofs
(revealed leaves plus covering subtrees) that must reproduce the root, and fail on any change."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.integrity.canonical import leaf_hash
from audit.integrity.merkle import EMPTY_ROOT, CompactRange, node_hash, reference_root, subtrees_covering


def leaves(count: int) -> list[bytes]:
    return [leaf_hash(f"leaf {index}".encode()) for index in range(count)]


def test_it_uses_the_rfc6962_prefixes() -> None:
    assert leaf_hash(b"") == hashlib.sha256(b"\x00").digest()
    assert node_hash(b"a" * 32, b"b" * 32) == hashlib.sha256(b"\x01" + b"a" * 32 + b"b" * 32).digest()
    assert CompactRange().root() == EMPTY_ROOT == hashlib.sha256(b"").digest()


def test_it_matches_a_known_rfc6962_root() -> None:
    # The eight test leaves used by Certificate Transparency implementations
    # (transparency-dev/merkle, testonly) and the root of the tree of all eight.
    data = [bytes.fromhex(value) for value in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657",
                                              "606162636465666768696a6b6c6d6e6f")]
    compact = CompactRange()
    for item in data:
        compact.append_record(item)
    assert compact.root().hex() == "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"


@pytest.mark.parametrize("size", range(0, 70))
def test_it_agrees_with_the_recursive_definition(size: int) -> None:
    compact = CompactRange()
    for leaf in leaves(size):
        compact.append_leaf(leaf)
    assert compact.root() == reference_root(leaves(size))
    resumed = CompactRange.from_frontier(size, compact.frontier)
    resumed.append_leaf(leaf_hash(b"next"))
    assert resumed.root() == reference_root([*leaves(size), leaf_hash(b"next")])


def test_it_reports_every_completed_subtree() -> None:
    seen: dict[tuple[int, int], bytes] = {}
    compact = CompactRange()
    hashes = leaves(37)
    for leaf in hashes:
        compact.append_leaf(leaf, lambda level, index, hash_: seen.__setitem__((level, index), hash_))
    for (level, index), hash_ in seen.items():
        assert hash_ == reference_root(hashes[index << level:(index + 1) << level])
    assert (5, 0) in seen and (2, 8) in seen and (0, 0) not in seen


def test_it_refuses_a_misaligned_subtree() -> None:
    compact = CompactRange()
    compact.append_leaf(leaves(1)[0])
    with pytest.raises(ValueError, match="cannot start"):
        compact.append_subtree(1, bytes(32))


def test_it_refuses_a_frontier_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match="needs 2 hashes"):
        CompactRange.from_frontier(5, [bytes(32)])


@given(start=st.integers(0, 300), length=st.integers(0, 300))
def test_it_covers_a_gap_with_maximal_aligned_subtrees(start: int, length: int) -> None:
    covered = start
    for level, index in subtrees_covering(start, start + length):
        assert index << level == covered
        covered += 1 << level
    assert covered == start + length


def multiproof(hashes: list[bytes], revealed: list[int]) -> list[tuple[str, int, bytes]]:
    """Items like an export bundle's: ('leaf', 0, hash) or ('node', level, hash)."""
    items: list[tuple[str, int, bytes]] = []
    position = 0
    for index in [*sorted(revealed), len(hashes)]:
        for level, subtree in subtrees_covering(position, index):
            items.append(("node", level, reference_root(hashes[subtree << level:(subtree + 1) << level])))
        if index < len(hashes):
            items.append(("leaf", 0, hashes[index]))
        position = index + 1
    return items


def fold(items: list[tuple[str, int, bytes]]) -> bytes:
    compact = CompactRange()
    for _, level, hash_ in items:
        compact.append_subtree(level, hash_)
    return compact.root()


@settings(max_examples=200)
@given(data=st.data(), size=st.integers(1, 200))
def test_a_multileaf_proof_reproduces_the_root_and_any_bit_flip_breaks_it(data: st.DataObject, size: int) -> None:
    hashes = leaves(size)
    revealed = data.draw(st.sets(st.integers(0, size - 1), max_size=12))
    items = multiproof(hashes, sorted(revealed))
    assert fold(items) == reference_root(hashes)
    position = data.draw(st.integers(0, len(items) - 1))
    bit = data.draw(st.integers(0, 255))
    kind, level, hash_ = items[position]
    flipped = bytearray(hash_)
    flipped[bit // 8] ^= 1 << (bit % 8)
    tampered = [*items[:position], (kind, level, bytes(flipped)), *items[position + 1:]]
    assert fold(tampered) != reference_root(hashes)


@given(size=st.integers(2, 100), data=st.data())
def test_a_proof_without_one_of_its_parts_does_not_reproduce_the_root(size: int, data: st.DataObject) -> None:
    hashes = leaves(size)
    items = multiproof(hashes, [data.draw(st.integers(0, size - 1))])
    dropped = data.draw(st.integers(0, len(items) - 1))
    remaining = items[:dropped] + items[dropped + 1:]
    try:
        assert fold(remaining) != reference_root(hashes)
    except ValueError:
        pass  # the rest no longer lines up: refused outright

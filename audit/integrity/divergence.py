"""Where two histories of the log part: the first sequence number at which they differ, named
exactly when the known hashes allow it, else the narrowest range they bound.

A *fact* is the RFC 6962 hash of the leaves ``[start, end)`` of one history: a checkpoint's root
(``[0, size)``) and head (``[size - 1, size)``), the subtrees of its compact range and of its
consistency proof (``audit.integrity.store``), or what a bundle reveals. Two histories agree on a
range where both know it with the same hash and differ somewhere inside it where the hashes
differ. So the first diverging leaf lies at or after the end of the longest run of agreeing
ranges from leaf 0, and before the end of any range that differs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Range = tuple[int, int]  # leaves [start, end), 0-based: seqs start + 1 .. end


@dataclass(frozen=True)
class Divergence:
    """The histories agree on seqs ``1..agreed`` and differ at one of seqs ``agreed + 1..bound``."""

    agreed: int
    bound: int

    @property
    def first_seq(self) -> int:
        return self.agreed + 1

    @property
    def exact(self) -> bool:
        return self.bound == self.agreed + 1

    def describe(self) -> str:
        if self.exact:
            return f"the histories diverge at seq {self.first_seq}"
        return (
            f"the histories agree up to seq {self.agreed} and diverge at one of seqs {self.agreed + 1}..{self.bound} "
            "(the checkpoints hold no finer hashes to tell which)"
        )


def subtree_facts(items: Iterable[tuple[int, int, bytes]]) -> dict[Range, bytes]:
    """Facts from ``(start leaf, level, hash)`` subtrees."""
    return {(start, start + (1 << level)): hash_ for start, level, hash_ in items}


def divergence_bounds(
    ours: Mapping[Range, bytes], theirs: Mapping[Range, bytes], *, agreed: int = 0, bound: int | None = None
) -> Divergence | None:
    """Bound the first leaf where two histories differ. ``agreed``: leaves known to agree
    (``[0, agreed)``); ``bound``: a range ``[0, bound)`` known to differ. None when no known hash
    differs and no ``bound`` was given: as far as the facts go, the histories agree."""
    equal: list[Range] = []
    for key, hash_ in ours.items():
        other = theirs.get(key)
        if other is None:
            continue
        if other == hash_:
            equal.append(key)
        else:
            bound = key[1] if bound is None else min(bound, key[1])
    for start, end in sorted(equal):  # sorted by start: once one starts past the run, all later ones do
        if start <= agreed < end:
            agreed = end
    if bound is None:
        return None
    return Divergence(agreed=min(agreed, bound - 1), bound=bound)

"""Following a bundle's walk (or the live log's replay) against the external store's checkpoints,
to say where they part.

The walk checks the root of its first ``size`` leaves at every size the store has a checkpoint
of. When one does not match, the histories forked: they agree up to the last store size that
matched and differ at or before this one. Within that window the store's proof file of the
checkpoint (its compact range and its consistency proof, ``audit.integrity.store``) names finer
subtrees; the walk keeps what the bundle revealed since the last match (up to a limit) to hash the
same subtrees and narrow the window, to one event when the store's hashes are fine enough.
"""

from __future__ import annotations

from collections.abc import Iterable

from audit.integrity.checkpoint import Checkpoint
from audit.integrity.divergence import Divergence, Range, divergence_bounds, subtree_facts
from audit.integrity.errors import VerificationFailure
from audit.integrity.merkle import CompactRange
from audit.integrity.store import ChainSummary

WINDOW_LIMIT = 1 << 16  # revealed items kept since the last matching store size


class ForkWatch:
    def __init__(self, *, store: ChainSummary, checkpoint: Checkpoint | None, subject: str = "the bundle's") -> None:
        self.store = store
        self.roots = store.roots_by_size
        self.checkpoint = checkpoint  # the bundle's own, whose mismatch the walk's end names more precisely
        self.subject = subject
        self.agreed = 0
        self.agreed_compact = CompactRange()
        self.window: list[tuple[int, int, bytes]] | None = []

    def observe(self, start: int, level: int, hash_: bytes) -> None:
        """A leaf (level 0) or proof node the walk just appended."""
        window = self.window
        if window is not None:
            window.append((start, level, hash_))
            if len(window) > WINDOW_LIMIT:
                self.window = None  # too far between store checkpoints: bound by the checkpoints alone

    def check(self, compact: CompactRange) -> None:
        """At a size the store has a checkpoint of: the bundle's prefix must reproduce its root."""
        position = compact.size
        root_and_number = self.roots.get(position)
        if root_and_number is None:
            return
        root = compact.root()
        if root == root_and_number[0]:
            self.agreed = position
            self.agreed_compact = CompactRange.from_frontier(position, compact.frontier)
            self.window = []
            return
        own = self.checkpoint
        if own is not None and position == own.size and root != own.root:
            return  # the events do not reproduce the bundle's own checkpoint either: the walk's end names the event
        found = self._bounds(compact, root_and_number[0])
        raise VerificationFailure(
            "rewritten",
            f"the first {position} events do not reproduce the root of checkpoint #{root_and_number[1]}: the log was "
            f"rewritten after that checkpoint was published ({self.subject} history forks from the store's): "
            f"{found.describe()}",
            seq=found.first_seq if found.exact else position,
        )

    def agreement(self) -> str:
        if not self.agreed:
            return f"no store checkpoint confirms any of {self.subject} events"
        return f"{self.subject} events agree with the store's checkpoints up to seq {self.agreed}"

    def _bounds(self, compact: CompactRange, store_root: bytes) -> Divergence:
        position = compact.size
        ours: dict[Range, bytes] = {(0, position): compact.root(), **subtree_facts(compact.subtrees())}
        theirs: dict[Range, bytes] = {(0, position): store_root}
        proof = self.store.proof_at(position)
        if proof is not None:
            theirs.update(proof.facts())
            if proof.previous_size == self.agreed and proof.extends(self.agreed_compact):
                extension = proof.extension_facts()  # genuine: it extends the tree both histories share
                theirs.update(extension)
                ours.update(self._window_facts(extension))
        found = divergence_bounds(ours, theirs, agreed=self.agreed, bound=position)
        assert found is not None  # the roots of [0, position) differ
        return found

    def _window_facts(self, wanted: Iterable[Range]) -> dict[Range, bytes]:
        """The bundle's hashes of the ``wanted`` subtrees, from what it revealed since the last match."""
        facts: dict[Range, bytes] = {}
        items = self.window or []
        for start, end in wanted:
            compact: CompactRange | None = CompactRange()
            for item_start, level, hash_ in items:
                item_end = item_start + (1 << level)
                if item_end <= start or item_start >= end:
                    continue
                if compact is None or item_start < start or item_end > end:
                    compact = None  # a proof node straddles the subtree: the bundle does not know its hash
                    break
                compact.append_subtree(level, hash_)
            if compact is not None and compact.size == end - start:
                facts[(start, end)] = compact.root()
        return facts

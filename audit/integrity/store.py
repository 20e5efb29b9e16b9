"""Checkpoints outside the database: a folder of write-once files, and the check of their chain.

Layout: ``<root>/<number // 10000, 8 digits>/<number, 12 digits>.checkpoint`` plus ``latest``
(a copy of the newest), and next to each checkpoint its ``.proof`` (``CheckpointProof``: the
compact range and the consistency proof from the previous checkpoint). A file is created with an
exclusive link, never overwritten, and made read-only. Point the folder at storage the database
administrators cannot rewrite (another host, an NFS export with WORM, an object store mounted with
object lock).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from audit.integrity.canonical import canonical_json
from audit.integrity.checkpoint import ZERO_HASH, Checkpoint, checkpoint_verify, note_hash
from audit.integrity.divergence import Range, divergence_bounds, subtree_facts
from audit.integrity.errors import VerificationFailure
from audit.integrity.keys import VerifierKey
from audit.integrity.merkle import CompactRange

SUFFIX = ".checkpoint"
PROOF_SUFFIX = ".proof"


@dataclass(frozen=True)
class CheckpointProof:
    """A checkpoint's unsigned companion: its compact range (the subtrees covering its ``size``
    events) and the subtrees covering the events added since the previous checkpoint, which
    extend that checkpoint's compact range to this one's root (an RFC 6962 consistency proof in
    compact-range form). Nothing in it is trusted: the frontier must fold to the signed root, the
    extension must reproduce it from the previous checkpoint's tree."""

    number: int
    size: int
    previous_size: int
    frontier: tuple[bytes, ...]
    extension: tuple[tuple[int, bytes], ...]  # (level, hash), left to right, covering [previous_size, size)

    def to_text(self) -> str:
        return canonical_json({
            "number": self.number, "size": self.size, "previous_size": self.previous_size,
            "frontier": [hash_.hex() for hash_ in self.frontier],
            "extension": [[level, hash_.hex()] for level, hash_ in self.extension],
        }).decode("ascii") + "\n"

    @classmethod
    def from_text(cls, text: str, *, number: int) -> CheckpointProof:
        try:
            value: Any = json.loads(text)
            proof = cls(
                number=int(value["number"]), size=int(value["size"]), previous_size=int(value["previous_size"]),
                frontier=tuple(bytes.fromhex(item) for item in value["frontier"]),
                extension=tuple((int(level), bytes.fromhex(hash_)) for level, hash_ in value["extension"]),
            )
            proof.compact()
        except (KeyError, TypeError, ValueError) as error:
            raise VerificationFailure("malformed", f"the proof file of checkpoint #{number} is malformed: {error}") from None
        if proof.number != number:
            raise VerificationFailure("malformed", f"the proof file of checkpoint #{number} names #{proof.number}")
        return proof

    def compact(self) -> CompactRange:
        return CompactRange.from_frontier(self.size, list(self.frontier))

    def facts(self) -> dict[Range, bytes]:
        """The frontier's subtrees (trusted once ``check`` passed)."""
        return subtree_facts(self.compact().subtrees())

    def extension_facts(self) -> dict[Range, bytes]:
        """The extension's subtrees (trusted once ``extends`` passed)."""
        items, start = [], self.previous_size
        for level, hash_ in self.extension:
            items.append((start, level, hash_))
            start += 1 << level
        return subtree_facts(items)

    def check(self, checkpoint: Checkpoint) -> None:
        if self.size != checkpoint.size or self.compact().root() != checkpoint.root:
            raise VerificationFailure(
                "malformed",
                f"the proof file of {checkpoint.describe()} does not reproduce its signed root: it was altered",
            )

    def extends(self, previous: CompactRange) -> bool:
        """Whether the extension takes ``previous`` (a checked compact range) to this frontier."""
        if previous.size != self.previous_size:
            return False
        compact = CompactRange.from_frontier(previous.size, previous.frontier)
        try:
            for level, hash_ in self.extension:
                compact.append_subtree(level, hash_)
        except ValueError:
            return False
        return compact.size == self.size and compact.frontier == list(self.frontier)


ProofLookup = Callable[[int], CheckpointProof | None]
"""A checkpoint's proof by number, or None when the store has none (older checkpoints)."""


class CheckpointFolder:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path_for(self, number: int) -> Path:
        return self.root / f"{number // 10000:08d}" / f"{number:012d}{SUFFIX}"

    def proof_path_for(self, number: int) -> Path:
        return self.path_for(number).with_suffix(PROOF_SUFFIX)

    def write(self, number: int, note: str, proof: CheckpointProof | None = None) -> Path:
        """Write checkpoint ``number`` (and its proof, first) once. Writing the same text again is
        a no-op; different text for an existing number raises ``FileExistsError``."""
        path = self.path_for(number)
        if proof is not None:
            self._write_once(self.proof_path_for(number), proof.to_text(), f"proof of checkpoint #{number}")
        if self._write_once(path, note, f"checkpoint #{number}"):
            self._write_latest(note)
        return path

    def _write_once(self, path: Path, text: str, what: str) -> bool:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            if path.read_text(encoding="utf-8") == text:
                return False
            raise FileExistsError(f"{path} already holds a different {what}")
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, delete=False) as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
            temporary = Path(handle.name)
        try:
            os.chmod(temporary, 0o444)
            os.link(temporary, path)  # fails if the file appeared meanwhile: never overwrite
        finally:
            temporary.unlink()
        return True

    def _write_latest(self, note: str) -> None:
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=self.root, delete=False) as handle:
            handle.write(note)
            temporary = Path(handle.name)
        os.replace(temporary, self.root / "latest")

    def numbers(self) -> list[int]:
        if not self.root.is_dir():
            return []
        return sorted(int(path.name[: -len(SUFFIX)]) for path in self.root.glob(f"*/*{SUFFIX}"))

    def read(self, number: int) -> str:
        return self.path_for(number).read_text(encoding="utf-8")

    def notes(self) -> Iterator[str]:
        for number in self.numbers():
            yield self.read(number)

    def proof(self, number: int) -> CheckpointProof | None:
        path = self.proof_path_for(number)
        if not path.is_file():
            return None
        return CheckpointProof.from_text(path.read_text(encoding="utf-8"), number=number)


@dataclass
class ChainSummary:
    """What a checked run of checkpoints established."""

    first: Checkpoint | None = None
    latest: Checkpoint | None = None
    latest_note: str = ""
    count: int = 0
    roots_by_size: dict[int, tuple[bytes, int]] = field(default_factory=dict)  # size -> (root, number)
    departments_by_size: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # size -> (count, root)
    quarantines_by_size: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # size -> (count, head)
    notes_by_number: dict[int, bytes] = field(default_factory=dict)  # number -> note hash
    consistent: int = 0  # successive pairs whose proof files prove the later tree extends the earlier
    proofs: ProofLookup | None = None

    def proof_at(self, size: int) -> CheckpointProof | None:
        """The checked proof of the first checkpoint of ``size`` events, when the store has one."""
        known = self.roots_by_size.get(size)
        if known is None or self.proofs is None:
            return None
        try:
            proof = self.proofs(known[1])
        except VerificationFailure:
            return None
        if proof is None or proof.size != size or proof.compact().root() != known[0]:
            return None
        return proof


def checkpoint_chain_verify(
    notes: Iterable[str], keys: Iterable[VerifierKey], *, from_genesis: bool = True, proofs: ProofLookup | None = None
) -> ChainSummary:
    """Check a run of checkpoints in number order: each signed by a trusted key, numbered without
    gaps, chained by ``previous``, never shrinking, with one root per size and, where ``proofs``
    has them, each tree an extension of the previous one. A fork or a split view names the first
    sequence number where the two histories differ, or the range the known hashes bound."""
    keys = list(keys)
    summary = ChainSummary(proofs=proofs)
    previous: Checkpoint | None = None
    previous_note = ""
    previous_proof: CheckpointProof | None = None
    for note in notes:
        checkpoint = checkpoint_verify(note, keys)
        proof = proofs(checkpoint.number) if proofs is not None else None
        if proof is not None:
            proof.check(checkpoint)
        if previous is None:
            if from_genesis and (checkpoint.number != 1 or checkpoint.previous != ZERO_HASH):
                raise VerificationFailure(
                    "checkpoint-missing", f"the checkpoints start at #{checkpoint.number}, not #1: earlier ones are missing"
                )
            summary.first = checkpoint
        else:
            _successor_check(previous, previous_note, checkpoint, previous_proof, proof)
            if proof is not None and previous_proof is not None:
                _consistency_check(previous, previous_proof, checkpoint, proof)
                summary.consistent += 1
        summary.roots_by_size.setdefault(checkpoint.size, (checkpoint.root, checkpoint.number))
        summary.departments_by_size.setdefault(
            checkpoint.size, (checkpoint.departments_size, checkpoint.departments_root)
        )
        summary.quarantines_by_size.setdefault(checkpoint.size, (checkpoint.quarantines, checkpoint.quarantine_head))
        summary.notes_by_number[checkpoint.number] = note_hash(note)
        summary.count += 1
        previous, previous_note, previous_proof = checkpoint, note, proof
    summary.latest, summary.latest_note = previous, previous_note
    return summary


def checkpoint_facts(checkpoint: Checkpoint, proof: CheckpointProof | None) -> dict[Range, bytes]:
    """What a signed checkpoint (and its checked proof) says about its history's hashes."""
    facts: dict[Range, bytes] = {(0, checkpoint.size): checkpoint.root}
    if checkpoint.size:
        facts[(checkpoint.size - 1, checkpoint.size)] = checkpoint.head
    if proof is not None:
        facts.update(proof.facts())
    return facts


def _where(
    previous: Checkpoint, previous_proof: CheckpointProof | None, checkpoint: Checkpoint, proof: CheckpointProof | None
) -> tuple[str, int | None]:
    """Where the histories of two checkpoints part, as far as their hashes tell."""
    found = divergence_bounds(checkpoint_facts(previous, previous_proof), checkpoint_facts(checkpoint, proof))
    if found is None:
        return "; their hashes show no difference in the events both cover", None
    return f"; {found.describe()}", found.first_seq


def _consistency_check(
    previous: Checkpoint, previous_proof: CheckpointProof, checkpoint: Checkpoint, proof: CheckpointProof
) -> None:
    if proof.previous_size != previous.size:
        raise VerificationFailure(
            "malformed",
            f"the proof file of checkpoint #{checkpoint.number} extends a tree of {proof.previous_size} events, but "
            f"checkpoint #{previous.number} covers {previous.size}",
        )
    if not proof.extends(previous_proof.compact()):
        where, seq = _where(previous, previous_proof, checkpoint, proof)
        raise VerificationFailure(
            "fork",
            f"checkpoint #{checkpoint.number} does not extend the tree of checkpoint #{previous.number}: its consistency "
            f"proof fails (the log was rewritten between them, or the proof file was altered){where}",
            seq=seq,
        )


def _successor_check(
    previous: Checkpoint, previous_note: str, checkpoint: Checkpoint,
    previous_proof: CheckpointProof | None = None, proof: CheckpointProof | None = None,
) -> None:
    if checkpoint.number == previous.number:
        raise VerificationFailure("split-view", f"there are two different checkpoints #{checkpoint.number}")
    if checkpoint.number != previous.number + 1:
        raise VerificationFailure(
            "checkpoint-missing",
            f"checkpoints #{previous.number + 1}..#{checkpoint.number - 1} are missing between "
            f"#{previous.number} and #{checkpoint.number}",
        )
    if checkpoint.previous != note_hash(previous_note):
        where, seq = _where(previous, previous_proof, checkpoint, proof)
        raise VerificationFailure(
            "fork",
            f"checkpoint #{checkpoint.number} does not chain to checkpoint #{previous.number}: the chain forked{where}",
            seq=seq,
        )
    if checkpoint.size < previous.size:
        raise VerificationFailure(
            "rollback",
            f"checkpoint #{checkpoint.number} covers {checkpoint.size} events, fewer than the {previous.size} of "
            f"#{previous.number}: the log was rolled back",
        )
    same = (checkpoint.root, checkpoint.head, checkpoint.departments_root, checkpoint.quarantines,
            checkpoint.quarantine_head)
    if checkpoint.size == previous.size and same != (
        previous.root, previous.head, previous.departments_root, previous.quarantines, previous.quarantine_head
    ):
        where, seq = _where(previous, previous_proof, checkpoint, proof)
        raise VerificationFailure(
            "split-view",
            f"checkpoints #{previous.number} and #{checkpoint.number} both cover {checkpoint.size} events but have "
            f"different roots{where}",
            seq=seq,
        )
    if checkpoint.time < previous.time:
        raise VerificationFailure(
            "time-order", f"checkpoint #{checkpoint.number} is dated before checkpoint #{previous.number}"
        )

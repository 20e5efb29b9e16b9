"""Checkpoints outside the database: a folder of write-once files, and the check of their chain.

Layout: ``<root>/<number // 10000, 8 digits>/<number, 12 digits>.checkpoint`` plus ``latest``
(a copy of the newest). A file is created with an exclusive link, never overwritten, and made
read-only. Point the folder at storage the database administrators cannot rewrite (another host,
an NFS export with WORM, an object store mounted with object lock).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from audit.integrity.checkpoint import ZERO_HASH, Checkpoint, checkpoint_verify, note_hash
from audit.integrity.errors import VerificationFailure
from audit.integrity.keys import VerifierKey

SUFFIX = ".checkpoint"


class CheckpointFolder:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path_for(self, number: int) -> Path:
        return self.root / f"{number // 10000:08d}" / f"{number:012d}{SUFFIX}"

    def write(self, number: int, note: str) -> Path:
        """Write checkpoint ``number`` once. Writing the same text again is a no-op; different
        text for an existing number raises ``FileExistsError``."""
        path = self.path_for(number)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            if path.read_text(encoding="utf-8") == note:
                return path
            raise FileExistsError(f"{path} already holds a different checkpoint #{number}")
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, delete=False) as handle:
            handle.write(note)
            handle.flush()
            os.fsync(handle.fileno())
            temporary = Path(handle.name)
        try:
            os.chmod(temporary, 0o444)
            os.link(temporary, path)  # fails if the file appeared meanwhile: never overwrite
        finally:
            temporary.unlink()
        self._write_latest(note)
        return path

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


@dataclass
class ChainSummary:
    """What a checked run of checkpoints established."""

    first: Checkpoint | None = None
    latest: Checkpoint | None = None
    latest_note: str = ""
    count: int = 0
    roots_by_size: dict[int, tuple[bytes, int]] = field(default_factory=dict)  # size -> (root, number)
    departments_by_size: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # size -> (count, root)
    notes_by_number: dict[int, bytes] = field(default_factory=dict)  # number -> note hash


def checkpoint_chain_verify(notes: Iterable[str], keys: Iterable[VerifierKey], *, from_genesis: bool = True) -> ChainSummary:
    """Check a run of checkpoints in number order: each signed by a trusted key, numbered without
    gaps, chained by ``previous``, never shrinking, and with one root per size."""
    keys = list(keys)
    summary = ChainSummary()
    previous: Checkpoint | None = None
    previous_note = ""
    for note in notes:
        checkpoint = checkpoint_verify(note, keys)
        if previous is None:
            if from_genesis and (checkpoint.number != 1 or checkpoint.previous != ZERO_HASH):
                raise VerificationFailure(
                    "checkpoint-missing", f"the checkpoints start at #{checkpoint.number}, not #1: earlier ones are missing"
                )
            summary.first = checkpoint
        else:
            _successor_check(previous, previous_note, checkpoint)
        summary.roots_by_size.setdefault(checkpoint.size, (checkpoint.root, checkpoint.number))
        summary.departments_by_size.setdefault(
            checkpoint.size, (checkpoint.departments_size, checkpoint.departments_root)
        )
        summary.notes_by_number[checkpoint.number] = note_hash(note)
        summary.count += 1
        previous, previous_note = checkpoint, note
    summary.latest, summary.latest_note = previous, previous_note
    return summary


def _successor_check(previous: Checkpoint, previous_note: str, checkpoint: Checkpoint) -> None:
    if checkpoint.number == previous.number:
        raise VerificationFailure("split-view", f"there are two different checkpoints #{checkpoint.number}")
    if checkpoint.number != previous.number + 1:
        raise VerificationFailure(
            "checkpoint-missing",
            f"checkpoints #{previous.number + 1}..#{checkpoint.number - 1} are missing between "
            f"#{previous.number} and #{checkpoint.number}",
        )
    if checkpoint.previous != note_hash(previous_note):
        raise VerificationFailure(
            "fork", f"checkpoint #{checkpoint.number} does not chain to checkpoint #{previous.number}: the chain forked"
        )
    if checkpoint.size < previous.size:
        raise VerificationFailure(
            "rollback",
            f"checkpoint #{checkpoint.number} covers {checkpoint.size} events, fewer than the {previous.size} of "
            f"#{previous.number}: the log was rolled back",
        )
    same = (checkpoint.root, checkpoint.head, checkpoint.departments_root)
    if checkpoint.size == previous.size and same != (previous.root, previous.head, previous.departments_root):
        raise VerificationFailure(
            "split-view",
            f"checkpoints #{previous.number} and #{checkpoint.number} both cover {checkpoint.size} events but have "
            "different roots",
        )
    if checkpoint.time < previous.time:
        raise VerificationFailure(
            "time-order", f"checkpoint #{checkpoint.number} is dated before checkpoint #{previous.number}"
        )

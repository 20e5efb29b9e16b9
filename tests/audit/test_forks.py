"""Forks: where two histories of the log part. The checkpoints' proof files (compact range and
consistency proof) let the verifiers prove each checkpoint extends the previous one and name the
first diverging sequence number, or the narrowest range the store's hashes bound."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from audit.export import audit_export_bundle
from audit.integrity.canonical import leaf_hash
from audit.integrity.checkpoint import ZERO_HASH, Checkpoint, checkpoint_sign, checkpoint_verify, note_hash
from audit.integrity.divergence import divergence_bounds
from audit.integrity.errors import VerificationFailure
from audit.integrity.keys import SigningKey, signing_key_generate
from audit.integrity.merkle import CompactRange, reference_root, subtrees_covering
from audit.integrity.replay import ReplayState
from audit.integrity.store import CheckpointFolder, CheckpointProof, checkpoint_chain_verify
from audit.integrity.verifier import BundleVerifier
from audit.models import AuditCheckpoint, AuditEvent
from audit.selectors import AuditFilters
from audit.verification import audit_log_verify
from tests.audit.conftest import ORIGIN, Publish, record_many, tamper

# -- the bounds, without a database -------------------------------------------------------------


def test_the_bounds_name_one_seq_when_the_hashes_allow_it() -> None:
    ours = {(0, 4): b"a", (4, 5): b"b", (0, 5): b"r"}
    theirs = {(0, 4): b"a", (4, 5): b"X", (0, 5): b"R"}
    found = divergence_bounds(ours, theirs)
    assert found is not None and found.exact and found.first_seq == 5
    assert found.describe() == "the histories diverge at seq 5"


def test_the_bounds_say_the_range_otherwise() -> None:
    found = divergence_bounds({(0, 8): b"a", (8, 12): b"b"}, {(0, 8): b"a", (8, 12): b"X"}, agreed=2)
    assert found is not None and (found.agreed, found.bound) == (8, 12) and not found.exact
    assert "agree up to seq 8 and diverge at one of seqs 9..12" in found.describe()
    assert divergence_bounds({(0, 8): b"a"}, {(0, 8): b"a"}) is None  # nothing differs
    assert divergence_bounds({(0, 8): b"a"}, {(8, 9): b"b"}, agreed=3, bound=9) == dataclasses.replace(
        found, agreed=3, bound=9)


def hashes(count: int, *, fork_at: int | None = None) -> list[bytes]:
    """Leaf hashes of a history; from leaf ``fork_at`` on, another history's."""
    return [leaf_hash(f"{'B' if fork_at is not None and index >= fork_at else 'A'} {index}".encode())
            for index in range(count)]


def proof(number: int, leaves: list[bytes], previous_size: int) -> CheckpointProof:
    compact = CompactRange()
    for leaf in leaves:
        compact.append_leaf(leaf)
    extension = tuple((level, reference_root(leaves[index << level:(index + 1) << level]))
                      for level, index in subtrees_covering(previous_size, len(leaves)))
    return CheckpointProof(number=number, size=len(leaves), previous_size=previous_size,
                           frontier=tuple(compact.frontier), extension=extension)


def signed(key: SigningKey, number: int, leaves: list[bytes], previous: str) -> str:
    return checkpoint_sign(Checkpoint(
        origin=ORIGIN, size=len(leaves), root=reference_root(leaves), head=leaves[-1] if leaves else ZERO_HASH,
        departments_size=0, departments_root=bytes(32), number=number,
        previous=note_hash(previous) if previous else ZERO_HASH, time=f"2026-01-01T00:00:{number:02d}.000000Z",
    ), key)


def store(key: SigningKey, histories: list[list[bytes]]) -> tuple[list[str], dict[int, CheckpointProof]]:
    notes: list[str] = []
    proofs: dict[int, CheckpointProof] = {}
    for number, leaves in enumerate(histories, start=1):
        notes.append(signed(key, number, leaves, notes[-1] if notes else ""))
        proofs[number] = proof(number, leaves, len(histories[number - 2]) if number > 1 else 0)
    return notes, proofs


@pytest.fixture
def key() -> SigningKey:
    return signing_key_generate(ORIGIN)


def test_the_proof_files_prove_each_checkpoint_extends_the_previous(key: SigningKey) -> None:
    notes, proofs = store(key, [hashes(size) for size in (0, 3, 3, 8, 13)])
    summary = checkpoint_chain_verify(notes, [key.verifier], proofs=proofs.get)
    assert summary.consistent == 4 and summary.proof_at(8) == proofs[4]


def test_a_checkpoint_that_does_not_extend_the_previous_is_a_fork_named_where_the_hashes_allow(key: SigningKey) -> None:
    notes, proofs = store(key, [hashes(6), hashes(7, fork_at=5)])  # signed with the right key and previous link
    with pytest.raises(VerificationFailure) as failure:
        checkpoint_chain_verify(notes, [key.verifier], proofs=proofs.get)
    assert failure.value.kind == "fork" and "does not extend the tree of checkpoint #1" in failure.value.message
    assert "agree up to seq 4 and diverge at one of seqs 5..6" in failure.value.message  # frontiers [0,4) [4,6)
    assert failure.value.seq == 5


def test_a_split_view_names_the_first_diverging_seq(key: SigningKey) -> None:
    notes, proofs = store(key, [hashes(5), hashes(5, fork_at=4)])
    with pytest.raises(VerificationFailure) as failure:
        checkpoint_chain_verify(notes, [key.verifier], proofs=proofs.get)
    assert failure.value.kind == "split-view" and failure.value.message.endswith("the histories diverge at seq 5")
    assert failure.value.seq == 5


def test_an_altered_proof_file_is_refused_not_believed(key: SigningKey) -> None:
    notes, proofs = store(key, [hashes(4), hashes(9)])
    proofs[2] = dataclasses.replace(proofs[2], frontier=(bytes(32), *proofs[2].frontier[1:]))
    with pytest.raises(VerificationFailure, match="does not reproduce its signed root") as failure:
        checkpoint_chain_verify(notes, [key.verifier], proofs=proofs.get)
    assert failure.value.kind == "malformed"


# -- a bundle of a forked history against the store's checkpoints --------------------------------

pytestmark_db = pytest.mark.django_db


@dataclasses.dataclass
class Fork:
    first: AuditCheckpoint  # the store's checkpoint before the fork (an odd size)
    second: AuditCheckpoint  # the store's checkpoint after it, six events later
    key: SigningKey
    folder: CheckpointFolder

    def forked_bundle(self, fork_seq: int) -> list[bytes]:
        """Replace the events from ``fork_seq`` on (as the database owner can), sign the new history
        as the next checkpoint (as the holder of the signing key can) and export it whole."""
        tamper("DELETE FROM audit_event WHERE seq >= %s", [fork_seq])
        record_many([None] * (self.second.size - fork_seq + 2))
        state = ReplayState.empty()
        for text in AuditEvent.objects.order_by("seq").values_list("record", flat=True):
            state.append(text.encode())
        checkpoint = Checkpoint(
            origin=ORIGIN, size=state.size, root=state.compact.root(), head=state.head,
            departments_size=len(state.heads), departments_root=state.departments_root(), number=self.second.number + 1,
            previous=note_hash(self.second.note), time="2099-01-01T00:00:00.000000Z",
        )
        row = AuditCheckpoint(number=checkpoint.number, size=checkpoint.size, root=checkpoint.root.hex(),
                              note=checkpoint_sign(checkpoint, self.key), frontier="[]", departments="")
        return b"".join(audit_export_bundle(filters=AuditFilters(), checkpoint=row)).splitlines()

    def verify(self, lines: list[bytes]) -> Any:
        summary = checkpoint_chain_verify(self.folder.notes(), [self.key.verifier], from_genesis=False,
                                          proofs=self.folder.proof)
        return BundleVerifier([self.key.verifier], store=summary).verify(lines)


@pytest.fixture
def fork(publish: Publish, signing_key: SigningKey, folder: CheckpointFolder) -> Fork:
    record_many([None, 1])
    if AuditEvent.objects.count() % 2 == 0:
        record_many([2])
    first = publish()
    record_many([1, None, 2, 1, None, 2])
    return Fork(first=first, second=publish(), key=signing_key, folder=folder)


def rewritten(fork: Fork, lines: list[bytes]) -> VerificationFailure:
    with pytest.raises(VerificationFailure) as failure:
        fork.verify(lines)
    assert failure.value.kind == "rewritten", failure.value
    assert f"root of checkpoint #{fork.second.number}" in failure.value.message
    return failure.value


@pytestmark_db
def test_the_verifier_names_the_first_diverging_seq(fork: Fork, tmp_path: Path) -> None:
    seq = fork.first.size + 1
    lines = fork.forked_bundle(seq)
    failure = rewritten(fork, lines)
    assert failure.seq == seq and failure.message.endswith(f"the histories diverge at seq {seq}")
    bundle, key_file = tmp_path / "forked.jsonl", tmp_path / "audit.pub"
    bundle.write_bytes(b"\n".join(lines) + b"\n")
    key_file.write_text(fork.key.verifier.vkey())
    result = subprocess.run(  # the offline verifier reads the proof files from the copy of the folder
        [sys.executable, "-m", "audit.verify", str(bundle), "--key", str(key_file), "--checkpoints",
         str(fork.folder.root)],
        capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.startswith(f"FAILED seq {seq} [rewritten]") and f"diverge at seq {seq}" in result.stdout
    with pytest.raises(VerificationFailure) as live:
        audit_log_verify()  # the database against its own checkpoints and the folder
    assert live.value.kind == "rewritten" and live.value.seq == seq
    assert live.value.message.endswith(f"the histories diverge at seq {seq}")


@pytestmark_db
def test_the_verifier_bounds_the_fork_by_the_store_hashes(fork: Fork) -> None:
    seq = fork.first.size + 3
    failure = rewritten(fork, fork.forked_bundle(seq))
    found = failure.message.rsplit("diverge at one of seqs ", 1)[1].split(" ")[0]
    low, high = (int(value) for value in found.split(".."))
    assert fork.first.size + 1 < low <= seq <= high < fork.second.size  # narrower than the checkpoints' window
    assert failure.seq == fork.second.size  # a range: the checkpoint it contradicts


@pytestmark_db
def test_without_proof_files_the_checkpoints_bound_the_fork(fork: Fork) -> None:
    for path in fork.folder.root.glob("*/*.proof"):
        path.unlink()
    seq = fork.first.size + 3
    failure = rewritten(fork, fork.forked_bundle(seq))
    assert failure.message.endswith(
        f"the histories agree up to seq {fork.first.size} and diverge at one of seqs {fork.first.size + 1}.."
        f"{fork.second.size} (the checkpoints hold no finer hashes to tell which)"
    )


@pytestmark_db
def test_a_checkpoint_of_the_same_number_says_how_far_the_events_agree(fork: Fork) -> None:
    lines = fork.forked_bundle(fork.second.size + 1)  # the events agree with every store checkpoint...
    header = json.loads(lines[0])
    signed_note = checkpoint_verify(header["checkpoint"], [fork.key.verifier])
    header["checkpoint"] = checkpoint_sign(dataclasses.replace(signed_note, number=fork.second.number), fork.key)
    from audit.integrity.canonical import canonical_json

    with pytest.raises(VerificationFailure) as failure:  # ...but its checkpoint takes the number of another
        fork.verify([canonical_json(header), *lines[1:]])
    assert failure.value.kind == "split-view"
    assert failure.value.message.endswith(f"agree with the store's checkpoints up to seq {fork.second.size}")

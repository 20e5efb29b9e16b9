"""Signed checkpoints and the chain of checkpoints in the external store (no database)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from audit.integrity.checkpoint import ZERO_HASH, Checkpoint, checkpoint_sign, checkpoint_verify, note_hash
from audit.integrity.errors import VerificationFailure
from audit.integrity.keys import SigningKey, signing_key_generate, signing_key_parse, verifier_key_parse
from audit.integrity.store import CheckpointFolder, checkpoint_chain_verify

ORIGIN = "test.gpuportal/audit"


def make(number: int, size: int, *, previous: str = "", root: bytes | None = None) -> Checkpoint:
    return Checkpoint(
        origin=ORIGIN, size=size, root=root or bytes([size % 256]) * 32, head=bytes([size % 256, 1]) * 16,
        departments_size=0, departments_root=bytes(32), number=number,
        previous=note_hash(previous) if previous else ZERO_HASH, time=f"2026-01-01T00:00:{number:02d}.000000Z",
    )


def chain(key: SigningKey, sizes: list[int]) -> list[str]:
    notes: list[str] = []
    for number, size in enumerate(sizes, start=1):
        notes.append(checkpoint_sign(make(number, size, previous=notes[-1] if notes else ""), key))
    return notes


@pytest.fixture
def key() -> SigningKey:
    return signing_key_generate(ORIGIN)


def test_it_round_trips_a_signed_checkpoint(key: SigningKey) -> None:
    checkpoint = make(1, 5)
    note = checkpoint_sign(checkpoint, key)
    assert note.startswith(f"{ORIGIN}\n5\n")
    assert "\n\n\u2014 " + ORIGIN + " " in note
    assert checkpoint_verify(note, [key.verifier]) == checkpoint


def test_it_refuses_an_edited_checkpoint(key: SigningKey) -> None:
    note = checkpoint_sign(make(1, 5), key).replace(f"{ORIGIN}\n5\n", f"{ORIGIN}\n6\n")
    with pytest.raises(VerificationFailure, match="was edited after it was signed") as failure:
        checkpoint_verify(note, [key.verifier])
    assert failure.value.kind == "signature"


def test_it_refuses_a_checkpoint_signed_by_an_unknown_key(key: SigningKey) -> None:
    stranger = signing_key_generate(ORIGIN)
    with pytest.raises(VerificationFailure, match="not a trusted key") as failure:
        checkpoint_verify(checkpoint_sign(make(1, 5), stranger), [key.verifier])
    assert failure.value.kind == "unknown-key"


def test_it_accepts_verifier_keys_as_strings_and_pem(key: SigningKey) -> None:
    note = checkpoint_sign(make(1, 5), key)
    vkey = key.verifier.vkey()
    assert vkey.startswith(ORIGIN + "+")
    pem = key.private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    for text in (vkey, pem):
        assert checkpoint_verify(note, [verifier_key_parse(text)]).size == 5
    with pytest.raises(ValueError, match="does not match"):
        verifier_key_parse(vkey.replace(ORIGIN, "other/log", 1))


def test_it_reads_a_signing_key_as_pem_or_seed(key: SigningKey) -> None:
    assert signing_key_parse(ORIGIN, key.private_pem()).key_id == key.key_id
    seed = key.private_key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    import base64

    assert signing_key_parse(ORIGIN, base64.b64encode(seed).decode()).key_id == key.key_id
    with pytest.raises(ValueError, match="32 bytes"):
        signing_key_parse(ORIGIN, base64.b64encode(b"short").decode())


def test_it_accepts_a_sound_chain(key: SigningKey) -> None:
    summary = checkpoint_chain_verify(chain(key, [0, 3, 3, 9]), [key.verifier])
    assert summary.count == 4 and summary.latest is not None and summary.latest.size == 9


@pytest.mark.parametrize(
    ("mutate", "kind", "message"),
    [
        (lambda notes: notes[:1] + notes[2:], "checkpoint-missing", "#2..#2 are missing"),
        (lambda notes: notes[1:], "checkpoint-missing", "start at #2"),
    ],
)
def test_it_names_a_missing_checkpoint(key: SigningKey, mutate: object, kind: str, message: str) -> None:
    notes = chain(key, [1, 2, 3])
    with pytest.raises(VerificationFailure, match=message) as failure:
        checkpoint_chain_verify(mutate(notes), [key.verifier])  # type: ignore[operator]
    assert failure.value.kind == kind


def test_it_names_a_fork(key: SigningKey) -> None:
    notes = chain(key, [1, 2])
    notes.append(checkpoint_sign(make(3, 3, previous="something else"), key))
    with pytest.raises(VerificationFailure, match="does not chain") as failure:
        checkpoint_chain_verify(notes, [key.verifier])
    assert failure.value.kind == "fork"


def test_it_names_a_rollback(key: SigningKey) -> None:
    with pytest.raises(VerificationFailure, match="rolled back") as failure:
        checkpoint_chain_verify(chain(key, [1, 5, 4]), [key.verifier])
    assert failure.value.kind == "rollback"


def test_it_names_two_checkpoints_of_one_size_with_different_roots(key: SigningKey) -> None:
    notes = chain(key, [1, 5])
    forged = dataclasses.replace(make(3, 5, previous=notes[-1]), root=b"\x99" * 32)
    notes.append(checkpoint_sign(forged, key))
    with pytest.raises(VerificationFailure, match="both cover 5 events but have different roots") as failure:
        checkpoint_chain_verify(notes, [key.verifier])
    assert failure.value.kind == "split-view"


def test_old_checkpoints_still_verify_after_a_key_rotation(key: SigningKey) -> None:
    new_key = signing_key_generate(ORIGIN)
    notes = chain(key, [1])
    notes.append(checkpoint_sign(make(2, 2, previous=notes[-1]), new_key))
    assert checkpoint_chain_verify(notes, [new_key.verifier, key.verifier]).count == 2
    with pytest.raises(VerificationFailure) as failure:
        checkpoint_chain_verify(notes, [new_key.verifier])
    assert failure.value.kind == "unknown-key"


def test_the_folder_writes_once(tmp_path: Path, key: SigningKey) -> None:
    folder = CheckpointFolder(tmp_path)
    note = chain(key, [1])[0]
    path = folder.write(1, note)
    assert path.name == "000000000001.checkpoint" and path.parent.name == "00000000"
    assert folder.write(1, note) == path  # the same text again is fine
    with pytest.raises(FileExistsError):
        folder.write(1, note + "x")
    assert folder.numbers() == [1]
    assert (tmp_path / "latest").read_text() == note
    assert path.stat().st_mode & 0o222 == 0


def test_a_checkpoint_after_a_quarantine_counts_them_and_older_ones_are_unchanged(key: SigningKey) -> None:
    plain = make(1, 5)
    assert "quarantines" not in plain.body() and len(plain.body().split("\n")) == 9  # byte-for-byte as before
    counted = dataclasses.replace(plain, quarantines=2, quarantine_head=b"\x07" * 32)
    note = checkpoint_sign(counted, key)
    assert "\nquarantines 2 BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n\n" in note
    assert checkpoint_verify(note, [key.verifier]) == counted
    import base64

    body = plain.body() + "quarantines x\n"  # validly signed, but not a count and a hash
    signature = base64.b64encode(key.key_id + key.sign(body.encode())).decode()
    with pytest.raises(VerificationFailure, match="should be 'quarantines N HASH'"):
        checkpoint_verify(f"{body}\n\u2014 {key.name} {signature}\n", [key.verifier])

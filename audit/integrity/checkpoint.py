"""Signed checkpoints: the log's size, Merkle root and chain head, signed with Ed25519.

The body follows the C2SP ``tlog-checkpoint`` format (origin, size, base64 root) with extension
lines, and the signature follows C2SP ``signed-note``::

    gpuportal/audit
    1042
    <base64 RFC 6962 root of the 1042 event hashes>
    head <base64 hash of event 1042>
    departments 3 <base64 root of the tree of the 3 department heads>
    number 77
    previous <base64 SHA-256 of checkpoint 76's full signed text>
    time 2026-11-29T17:55:00.123456Z
    quarantines 1 <base64 hash of the latest audit.quarantined event>    only after a quarantine

    — gpuportal/audit <base64(key id || signature)>

``number`` counts checkpoints without gaps (one a minute, even when nothing changed) and
``previous`` chains them, so a deleted, replayed or forked checkpoint shows. The ``quarantines``
line appears once the log holds an ``audit.quarantined`` event (``audit.integrity.quarantine``):
it commits every later checkpoint to how many quarantines the log has recorded, so a bundle cannot
leave one out. Checkpoints without it (every checkpoint before the first quarantine) are
byte-for-byte what they were.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from audit.integrity.errors import VerificationFailure
from audit.integrity.keys import SigningKey, VerifierKey

SIGNATURE_PREFIX = "\u2014 "
ZERO_HASH = bytes(32)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error:
        raise VerificationFailure("malformed", f"checkpoint {what} is not base64") from None
    if len(raw) != 32:
        raise VerificationFailure("malformed", f"checkpoint {what} is not a 32-byte hash")
    return raw


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    head: bytes
    departments_size: int
    departments_root: bytes
    number: int
    previous: bytes
    time: str
    quarantines: int = 0  # audit.quarantined events in the first ``size`` events
    quarantine_head: bytes = ZERO_HASH  # hash of the latest of them

    def body(self) -> str:
        body = (
            f"{self.origin}\n{self.size}\n{_b64(self.root)}\n"
            f"head {_b64(self.head)}\n"
            f"departments {self.departments_size} {_b64(self.departments_root)}\n"
            f"number {self.number}\n"
            f"previous {_b64(self.previous)}\n"
            f"time {self.time}\n"
        )
        if self.quarantines:
            body += f"quarantines {self.quarantines} {_b64(self.quarantine_head)}\n"
        return body

    def describe(self) -> str:
        return f"checkpoint #{self.number} (size {self.size}, {self.time})"


def checkpoint_sign(checkpoint: Checkpoint, key: SigningKey) -> str:
    body = checkpoint.body()
    signature = key.sign(body.encode("utf-8"))
    return f"{body}\n{SIGNATURE_PREFIX}{key.name} {_b64(key.key_id + signature)}\n"


def note_hash(note: str) -> bytes:
    """What the next checkpoint's ``previous`` line commits to."""
    return hashlib.sha256(note.encode("utf-8")).digest()


def _parse_body(body: str) -> Checkpoint:
    lines = body.split("\n")
    if len(lines) not in (9, 10) or lines[-1] != "":
        raise VerificationFailure("malformed", "checkpoint body does not have the expected eight (or nine) lines")
    quarantines, quarantine_head = 0, ZERO_HASH
    if len(lines) == 10:
        count, _, head_text = lines[8].removeprefix("quarantines ").partition(" ")
        if not lines[8].startswith("quarantines ") or not count.isdigit() or int(count) < 1:
            raise VerificationFailure("malformed", f"checkpoint line {lines[8]!r} should be 'quarantines N HASH'")
        quarantines, quarantine_head = int(count), _unb64(head_text, "quarantine head")
    origin, size_text, root_text = lines[0], lines[1], lines[2]
    extensions: dict[str, str] = {}
    for line, name in zip(lines[3:8], ("head", "departments", "number", "previous", "time"), strict=True):
        prefix = name + " "
        if not line.startswith(prefix):
            raise VerificationFailure("malformed", f"checkpoint line {line!r} should start with {prefix!r}")
        extensions[name] = line[len(prefix):]
    departments_size, _, departments_root = extensions["departments"].partition(" ")
    if not origin or not size_text.isdigit() or not extensions["number"].isdigit() or not departments_size.isdigit():
        raise VerificationFailure("malformed", "checkpoint origin, size, number or departments is malformed")
    return Checkpoint(
        origin=origin,
        size=int(size_text),
        root=_unb64(root_text, "root"),
        head=_unb64(extensions["head"], "head"),
        departments_size=int(departments_size),
        departments_root=_unb64(departments_root, "departments root"),
        number=int(extensions["number"]),
        previous=_unb64(extensions["previous"], "previous"),
        time=extensions["time"],
        quarantines=quarantines,
        quarantine_head=quarantine_head,
    )


def _describe_raw(body: str) -> str:
    lines = body.split("\n")
    number = next((line[len("number "):] for line in lines if line.startswith("number ")), "?")
    size = lines[1] if len(lines) > 1 else "?"
    return f"checkpoint #{number} (size {size})"


def checkpoint_verify(note: str, keys: Iterable[VerifierKey]) -> Checkpoint:
    """Check a signed checkpoint's signature against the trusted keys, then parse it.

    Raises ``VerificationFailure`` of kind ``malformed``, ``unknown-key`` or ``signature``.
    """
    body, separator, signature_block = note.partition("\n\n")
    if not separator or not signature_block.endswith("\n"):
        raise VerificationFailure("malformed", "checkpoint has no signature block")
    body += "\n"
    keys = list(keys)
    signers: list[str] = []
    for line in signature_block[:-1].split("\n"):
        if not line.startswith(SIGNATURE_PREFIX):
            raise VerificationFailure("malformed", f"checkpoint signature line {line!r} is malformed")
        name, _, encoded = line[len(SIGNATURE_PREFIX):].rpartition(" ")
        try:
            raw = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            raise VerificationFailure("malformed", "checkpoint signature is not base64") from None
        if len(raw) != 4 + 64:
            raise VerificationFailure("malformed", "checkpoint signature has the wrong length")
        id_, signature = raw[:4], raw[4:]
        signers.append(f"{name} (key id {id_.hex()})")
        for key in keys:
            if key.matches(name, id_):
                if not key.verify(signature, body.encode("utf-8")):
                    raise VerificationFailure(
                        "signature",
                        f"the signature of {_describe_raw(body)} does not verify: the checkpoint was edited "
                        "after it was signed",
                    )
                return _parse_body(body)
    raise VerificationFailure(
        "unknown-key",
        f"{_describe_raw(body)} is signed by {', '.join(signers)}, which is not a trusted key",
    )

"""An independent check of an audit export, written from the format in docs/audit.md.

It imports nothing of the portal: a copy of the checks an auditor can read in one sitting, so the
client does not have to trust the code of the server it is checking. For a **bundle** it checks the
checkpoint's Ed25519 signature (C2SP signed-note) against the trusted keys, every event's place in
the tree (``seq``), its chain link (``prev_hash`` is the SHA-256 leaf hash of the event before) and
its department link, rebuilds the RFC 6962 root from the events and proof nodes and compares it and
the head with the signed ones, and, for an export without a department, actor or action filter,
that the events are complete for the time range (consecutive, bounded by the first event or a
context event before the range and by the checkpoint's size or a context event after it). For
**JSON Lines** (no checkpoint) it checks the chain and department links between the events, and
that the sequence numbers have no gaps unless the export was filtered: intact, but anchored to
nothing signed. The full verifier with the external checkpoint folder, department completeness
and fork location is ``python -m audit.verify`` (docs/audit.md).

A bundle gets **two answers**, as from that verifier: *genuine* (all of the above, as of the
bundle's own checkpoint) and *complete as of now* (``cli.auditcurrency``): against a newer signed
checkpoint (the portal's latest, or one given in a file), checked with the same trusted keys. When
the newer one covers more events, the bundle is genuine but NOT complete as of now; the newer tree
must extend the one the bundle's events rebuilt (a consistency proof in compact-range form: the
subtrees covering the added events), or the log was rewritten and the check fails.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

META = b'{"@":'
SIGNATURE_PREFIX = "\u2014 "


class ExportInvalid(Exception):
    def __init__(self, kind: str, message: str, seq: int | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.seq = kind, message, seq

    def line(self) -> str:
        return f"FAILED {f'seq {self.seq}' if self.seq is not None else 'export'} [{self.kind}]: {self.message}"


@dataclass
class Report:
    format: str
    events: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    checkpoint: dict[str, Any] | None = None
    signed_by: str | None = None
    complete: bool | None = None
    notes: list[str] = field(default_factory=list)
    current: bool | None = None  # complete as of now: None until a newer checkpoint is known
    as_of_now: str | None = None  # the second answer's line
    latest: dict[str, Any] | None = None  # the newer checkpoint it was answered against
    tree: _Tree | None = field(default=None, repr=False)  # the tree a bundle's events rebuilt

    def summary(self) -> str:
        span = f"seq {self.first_seq}..{self.last_seq}" if self.first_seq is not None else "no events"
        lines = [f"VERIFIED {self.format}: {self.events} event{'' if self.events == 1 else 's'} ({span})"]
        if self.checkpoint:
            cp = self.checkpoint
            lines.append(f"  checkpoint #{cp['number']} (size {cp['size']}, {cp['time']}) signed by {self.signed_by}")
        lines += [f"  {note}" for note in self.notes]
        if self.as_of_now:
            lines.append(self.as_of_now)
        return "\n".join(lines)


def _leaf(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


class _Tree:
    """RFC 6962 compact range: aligned perfect subtrees appended left to right, folded into the root."""

    def __init__(self) -> None:
        self.size = 0
        self.stack: list[tuple[int, bytes]] = []

    def append(self, level: int, hash_: bytes) -> None:
        if self.size % (1 << level):
            raise ExportInvalid("malformed", f"a proof node of level {level} cannot start at leaf {self.size}")
        self.stack.append((level, hash_))
        self.size += 1 << level
        while len(self.stack) > 1 and self.stack[-1][0] == self.stack[-2][0]:
            (level_, right), (_, left) = self.stack.pop(), self.stack.pop()
            self.stack.append((level_ + 1, _node(left, right)))

    def root(self) -> bytes:
        if not self.stack:
            return hashlib.sha256(b"").digest()
        root = self.stack[-1][1]
        for _, hash_ in reversed(self.stack[:-1]):
            root = _node(hash_, root)
        return root


# ---- keys and the signed checkpoint ------------------------------------------------------------


@dataclass(frozen=True)
class TrustedKey:
    name: str | None  # None: a PEM key, good for the name its signature line carries
    raw: bytes  # the 32-byte Ed25519 public key

    def key_id(self, name: str) -> bytes:
        return hashlib.sha256(name.encode("utf-8") + b"\n\x01" + self.raw).digest()[:4]


def trusted_key_parse(argument: str) -> TrustedKey:
    """A verifier key ``name+keyid+base64(0x01 || key)``, or a PEM public key, or a file holding one."""
    path = Path(argument)
    text = (path.read_text(encoding="ascii") if path.is_file() else argument).strip()
    if text.startswith("-----BEGIN"):
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        pem = serialization.load_pem_public_key(text.encode("ascii"))
        if not isinstance(pem, Ed25519PublicKey):
            raise ValueError("not an Ed25519 public key")
        return TrustedKey(None, pem.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))
    parts = text.split("+", 2)
    if len(parts) != 3:
        raise ValueError("a verifier key is 'name+keyid+base64' or a PEM public key")
    try:
        raw, id_ = base64.b64decode(parts[2], validate=True), bytes.fromhex(parts[1])
    except (binascii.Error, ValueError):
        raise ValueError("the verifier key is not valid base64 / hex") from None
    if len(raw) != 33 or raw[0] != 1:
        raise ValueError("the verifier key is not an Ed25519 key")
    key = TrustedKey(parts[0], raw[1:])
    if key.key_id(parts[0]) != id_:
        raise ValueError("the verifier key's id does not match its name and key")
    return key


def _b64hash(text: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error:
        raw = b""
    if len(raw) != 32:
        raise ExportInvalid("malformed", f"the checkpoint's {what} is not a base64 SHA-256 hash")
    return raw


def checkpoint_check(note: str, keys: Sequence[TrustedKey]) -> tuple[dict[str, Any], str]:
    """The checkpoint's fields and its signer, once a trusted key's signature verifies."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    body, separator, block = note.partition("\n\n")
    if not separator or not block.endswith("\n"):
        raise ExportInvalid("malformed", "the checkpoint has no signature")
    body += "\n"
    for line in block[:-1].split("\n"):
        name, _, encoded = line.removeprefix(SIGNATURE_PREFIX).rpartition(" ")
        try:
            raw = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            raise ExportInvalid("malformed", "a checkpoint signature is not base64") from None
        for key in keys:
            if len(raw) == 68 and key.name in (None, name) and key.key_id(name) == raw[:4]:
                try:
                    Ed25519PublicKey.from_public_bytes(key.raw).verify(raw[4:], body.encode("utf-8"))
                except InvalidSignature:
                    raise ExportInvalid("signature", "the checkpoint's signature does not verify: it was edited") from None
                return _checkpoint_fields(body), f"{name} (key id {raw[:4].hex()})"
    raise ExportInvalid("unknown-key", "the checkpoint is not signed by a trusted key")


def _checkpoint_fields(body: str) -> dict[str, Any]:
    lines = body.split("\n")
    extensions = dict(line.split(" ", 1) for line in lines[3:] if " " in line)
    if len(lines) < 9 or not lines[1].isdigit() or not extensions.get("number", "").isdigit():
        raise ExportInvalid("malformed", "the checkpoint body is not origin, size, root and its extension lines")
    return {
        "origin": lines[0], "size": int(lines[1]), "root": _b64hash(lines[2], "root"),
        "head": _b64hash(extensions.get("head", ""), "head"), "number": int(extensions["number"]),
        "time": extensions.get("time", "?"),
    }


# ---- the events ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Event:
    seq: int
    prev_hash: str
    occurred_at: str
    department_id: int | None
    department_seq: int | None
    department_prev_hash: str | None
    hash: str


def _event(data: bytes, where: str) -> _Event:
    try:
        record = json.loads(data.decode("ascii"))
        event = _Event(
            record["seq"], record["prev_hash"], record["occurred_at"], record["department_id"],
            record["department_seq"], record["department_prev_hash"], _leaf(data).hex(),
        )
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        raise ExportInvalid("malformed", f"{where} is not an audit record ({error})") from None
    if type(event.seq) is not int or not isinstance(event.prev_hash, str) or len(event.prev_hash) != 64:
        raise ExportInvalid("malformed", f"{where} has no valid seq and prev_hash")
    return event


class _Chain:
    """The global and department links between the events seen so far."""

    def __init__(self) -> None:
        self.last: _Event | None = None
        self.departments: dict[int, _Event] = {}
        self.gaps = 0

    def add(self, event: _Event) -> None:
        last = self.last
        if last is not None:
            if event.seq <= last.seq:
                kind = "duplicated" if event.seq == last.seq else "reordered"
                raise ExportInvalid(kind, f"event {event.seq} follows event {last.seq}", event.seq)
            if event.seq == last.seq + 1 and event.prev_hash != last.hash:
                raise ExportInvalid(
                    "altered", f"its prev_hash is not the hash of event {last.seq}: one of the two was changed", event.seq
                )
            if event.seq > last.seq + 1:
                self.gaps += 1
            if event.occurred_at < last.occurred_at:
                raise ExportInvalid("reordered", f"it is dated before event {last.seq}", event.seq)
        elif event.seq == 1 and event.prev_hash != "0" * 64:
            raise ExportInvalid("altered", "the first event's prev_hash is not the genesis hash", event.seq)
        if event.department_id is not None and event.department_seq is not None:
            previous = self.departments.get(event.department_id)
            if previous is not None and previous.department_seq is not None:
                if event.department_seq <= previous.department_seq:
                    raise ExportInvalid("reordered", f"its department_seq does not follow event {previous.seq}'s", event.seq)
                if event.department_seq == previous.department_seq + 1 and event.department_prev_hash != previous.hash:
                    raise ExportInvalid(
                        "altered", f"its department_prev_hash is not the hash of event {previous.seq}", event.seq
                    )
            self.departments[event.department_id] = event
        self.last = event


def jsonl_verify(lines: Iterable[bytes], *, filtered: bool) -> Report:
    """The chain of a JSON Lines export; gaps in ``seq`` fail unless the export was ``filtered``."""
    report, chain = Report(format="JSON Lines export"), _Chain()
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip(b"\r\n")
        if not line:
            continue
        event = _event(line, f"line {number}")
        chain.add(event)
        if chain.gaps and not filtered:
            raise ExportInvalid("missing", "events are missing before it", event.seq)
        report.events += 1
        report.first_seq = report.first_seq or event.seq
        report.last_seq = event.seq
    report.complete = None
    report.notes.append("chain and department links intact; anchored to no signed checkpoint (a bundle is)")
    if filtered and chain.gaps:
        report.notes.append(f"{chain.gaps} gaps between events, expected of a filtered export")
    return report


def _meta(line: bytes, number: int) -> dict[str, Any]:
    try:
        meta = json.loads(line)
    except ValueError:
        meta = None
    if not isinstance(meta, dict):
        raise ExportInvalid("malformed", f"line {number} is not a JSON object")
    return meta


def _nodes(meta: dict[str, Any], number: int) -> list[tuple[int, int, bytes]]:
    """A nodes line's ``[start, level, hex]`` items, checked for shape."""
    try:
        nodes = [(start, level, bytes.fromhex(hex_)) for start, level, hex_ in meta["nodes"]]
    except (KeyError, TypeError, ValueError):
        raise ExportInvalid("malformed", f"line {number} is not a list of [start, level, hash] nodes") from None
    if any(type(start) is not int or type(level) is not int or not 0 <= level < 64 or len(hash_) != 32
           for start, level, hash_ in nodes):
        raise ExportInvalid("malformed", f"line {number} has a node that is not [leaf, level 0-63, SHA-256]")
    return nodes


def bundle_verify(lines: Iterable[bytes], *, keys: Sequence[TrustedKey]) -> Report:
    """A bundle: signature, places, links, the signed root and head, and a global scope's completeness."""
    iterator = iter(lines)
    try:
        header = json.loads(next(iterator))
    except (StopIteration, ValueError):
        raise ExportInvalid("malformed", "the export is empty or has no bundle header") from None
    if not isinstance(header, dict) or header.get("@") != "bundle" or header.get("version") != 1:
        raise ExportInvalid("malformed", "the first line is not a version 1 bundle header")
    checkpoint, signer = checkpoint_check(str(header.get("checkpoint", "")), keys)
    scope = header.get("scope") or {}
    walk = _BundleWalk(Report(format="bundle", checkpoint=checkpoint, signed_by=signer, tree=_Tree()),
                       global_scope=all(scope.get(name) is None for name in ("departments", "actors", "actions")))
    for number, raw in enumerate(iterator, 2):
        walk.read(number, raw.rstrip(b"\r\n"))
    walk.check_end(checkpoint)
    report = walk.report
    if walk.global_scope:
        _completeness(scope, walk.first, walk.last, checkpoint["size"])
        report.complete = True
        report.notes.append(f"complete: every event of the range ({_range(scope)}) is in the export")
    else:
        report.complete = None
        report.notes.append("events proved included; department/actor/action completeness: run python -m audit.verify")
    return report


@dataclass
class _BundleWalk:
    """A bundle's lines after its header, read in order: the tree and chain they rebuild, the first
    and last events revealed (each with whether it is context), and what a later line decides."""

    report: Report
    global_scope: bool
    chain: _Chain = field(default_factory=_Chain)
    first: tuple[_Event, bool] | None = None
    last: tuple[_Event, bool] | None = None
    hidden_after_revealed: bool = False
    ended: dict[str, Any] | None = None
    suspect: _Event | None = None  # out of place: the next event tells a swap from a deletion

    @property
    def tree(self) -> _Tree:
        assert self.report.tree is not None
        return self.report.tree

    def read(self, number: int, line: bytes) -> None:
        if self.ended is not None:
            raise ExportInvalid("malformed", f"line {number} follows the end line")
        context = quarantine = False
        if line.startswith(META):
            record = self._meta_line(_meta(line, number), number)
            if record is None:
                return
            line, context, quarantine = record
        self._event(_event(line, f"line {number}"), context=context, quarantine=quarantine)

    def _meta_line(self, meta: dict[str, Any], number: int) -> tuple[bytes, bool, bool] | None:
        """None for a nodes, end or departments line; a context or quarantine line's record and kind."""
        kind = meta.get("@")
        if kind == "nodes":
            for start, level, hash_ in _nodes(meta, number):
                if start != self.tree.size:
                    raise ExportInvalid("missing", f"a proof node starts at leaf {start}, not {self.tree.size}",
                                        self.tree.size + 1)
                self.tree.append(level, hash_)
                self.hidden_after_revealed = self.first is not None
            return None
        if kind == "end":
            self.ended = meta
            return None
        if kind == "departments":
            return None
        if kind not in ("context", "quarantine"):
            raise ExportInvalid("malformed", f"line {number} is an unknown {kind!r} line")
        record = meta.get("record")
        if not isinstance(record, str) or not record.isascii():
            raise ExportInvalid("malformed", f"line {number}'s record is not an ASCII string")
        return record.encode("ascii"), kind == "context", kind == "quarantine"

    def _event(self, event: _Event, *, context: bool, quarantine: bool) -> None:
        tree, report = self.tree, self.report
        if self.suspect is not None:
            kind = "reordered" if event.seq == tree.size + 1 else "missing"
            raise ExportInvalid(kind, f"it stands where event {tree.size + 1} belongs", self.suspect.seq)
        if event.seq != tree.size + 1:
            if event.seq < tree.size + 1:
                raise ExportInvalid("duplicated", f"it stands where event {tree.size + 1} belongs", event.seq)
            self.suspect = event
            return
        self.chain.add(event)
        tree.append(0, bytes.fromhex(event.hash))
        if quarantine:  # revealed whatever the scope: outside the range, in its place
            return
        if self.global_scope and self.hidden_after_revealed:
            raise ExportInvalid("incomplete", "events of the range are hidden behind proof nodes", event.seq)
        self.first = self.first or (event, context)
        self.last = (event, context)
        if not context:
            report.events += 1
            report.first_seq = report.first_seq or event.seq
            report.last_seq = event.seq

    def check_end(self, checkpoint: dict[str, Any]) -> None:
        """After the last line: nothing out of place, the end line, and the signed size, root and head."""
        tree, last = self.tree, self.last
        if self.suspect is not None:
            raise ExportInvalid("missing", f"it stands where event {tree.size + 1} belongs", self.suspect.seq)
        if self.ended is None:
            raise ExportInvalid("truncated", "the bundle has no end line: it was cut short")
        if tree.size != checkpoint["size"]:
            raise ExportInvalid("truncated", f"the bundle covers {tree.size} events, its checkpoint {checkpoint['size']}")
        if tree.root() != checkpoint["root"]:
            raise ExportInvalid("altered", "the events and proof nodes do not reproduce the checkpoint's signed root")
        if last is not None and last[0].seq == checkpoint["size"] and last[0].hash != checkpoint["head"].hex():
            raise ExportInvalid("altered", "the last event is not the checkpoint's head", last[0].seq)
        if (counted := self.ended.get("events")) != self.report.events:
            raise ExportInvalid("malformed", f"the end line counts {counted} events, the bundle has {self.report.events}")


def _range(scope: dict[str, Any]) -> str:
    return f"{scope.get('from') or 'the first event'} to {scope.get('to') or 'the checkpoint'}"


def _completeness(scope: dict[str, Any], first: tuple[_Event, bool] | None, last: tuple[_Event, bool] | None,
                  size: int) -> None:
    if first is None or last is None:
        if size:
            raise ExportInvalid("incomplete", "the export reveals no event, but the log is not empty")
        return
    event, context = first
    if not (event.seq == 1 or (context and scope.get("from") and event.occurred_at < scope["from"])):
        raise ExportInvalid("incomplete", "the export does not start at the first event or before its range", event.seq)
    event, context = last
    if not (event.seq == size or (context and scope.get("to") and event.occurred_at >= scope["to"])):
        raise ExportInvalid("truncated", "the export ends before its range does", event.seq)


def export_verify(path: Path, *, keys: Sequence[TrustedKey], filtered: bool) -> Report:
    """Verify the export in ``path``: a bundle when its first line is a bundle header, else JSON Lines."""
    with path.open("rb") as handle:
        head = handle.read(len(b'{"@":"bundle"'))
        handle.seek(0)
        if head == b'{"@":"bundle"':
            if not keys:
                raise ExportInvalid("unknown-key", "no trusted key to check the checkpoint's signature with")
            return bundle_verify(handle, keys=keys)
        return jsonl_verify(handle, filtered=filtered)


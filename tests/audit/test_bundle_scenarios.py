"""One test per way to cheat an export bundle, in the manner of aws-cli's CloudTrail scenarios:
each tampered bundle must fail offline verification with a specific kind, message and first bad
sequence number. Bundles are real exports of a real log; the tampering is done on their lines."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from audit.export import audit_export_bundle
from audit.integrity.canonical import canonical_json, leaf_hash
from audit.integrity.checkpoint import checkpoint_sign, checkpoint_verify, note_hash
from audit.integrity.errors import VerificationFailure
from audit.integrity.keys import SigningKey, signing_key_generate
from audit.integrity.report import BundleReport
from audit.integrity.store import CheckpointFolder, checkpoint_chain_verify
from audit.integrity.verifier import BundleVerifier
from audit.models import AuditCheckpoint, AuditEvent
from audit.selectors import AuditFilters
from tests.audit.conftest import ORIGIN, Publish, record_many

pytestmark = pytest.mark.django_db

A, B = 901, 902  # two departments (the log does not need them to exist)
Lines = list[bytes]


@dataclasses.dataclass
class Log:
    events: list[AuditEvent]
    first: AuditCheckpoint  # an older checkpoint, of the first half of the events
    latest: AuditCheckpoint
    key: SigningKey
    folder: CheckpointFolder

    def bundle(self, filters: AuditFilters | None = None, checkpoint: AuditCheckpoint | None = None) -> Lines:
        chunks = audit_export_bundle(filters=filters or AuditFilters(), checkpoint=checkpoint or self.latest)
        return b"".join(chunks).splitlines()

    def verify(self, lines: Lines, *, store: bool = False, key: SigningKey | None = None) -> BundleReport:
        keys = [(key or self.key).verifier]
        summary = checkpoint_chain_verify(self.folder.notes(), keys, from_genesis=False) if store else None
        return BundleVerifier(keys, store=summary).verify(lines)

    def seq(self, index: int) -> int:
        return self.events[index].seq


@pytest.fixture
def log(publish: Publish, signing_key: SigningKey, folder: CheckpointFolder) -> Log:
    first = record_many([A, B, None, A, B, A, None, B, A, B])
    older = publish()
    second = record_many([A, A, B, None, A, B, B, A, None, A])
    return Log(events=first + second, first=older, latest=publish(), key=signing_key, folder=folder)


def fails(log: Log, lines: Lines, kind: str, seq: int | None, *fragments: str, store: bool = False,
          key: SigningKey | None = None) -> VerificationFailure:
    with pytest.raises(VerificationFailure) as failure:
        log.verify(lines, store=store, key=key)
    assert failure.value.kind == kind, failure.value
    assert failure.value.seq == seq, failure.value
    for fragment in fragments:
        assert fragment in failure.value.message, failure.value
    return failure.value


def line_of(lines: Lines, seq: int) -> int:
    for index, line in enumerate(lines):
        if not line.startswith(b'{"@"') and json.loads(line)["seq"] == seq:
            return index
    raise LookupError(seq)


def forged(line: bytes, **changes: Any) -> bytes:
    record = json.loads(line)
    record.update(changes)
    return canonical_json(record)


def hidden(line: bytes) -> bytes:
    """Replace an event by the proof node of its leaf: the proof still adds up."""
    return canonical_json({"@": "nodes", "nodes": [[json.loads(line)["seq"] - 1, 0, leaf_hash(line).hex()]]})


def edit(lines: Lines, index: int, change: Callable[[bytes], bytes]) -> Lines:
    return [*lines[:index], change(lines[index]), *lines[index + 1:]]


# -- the untouched exports verify ------------------------------------------------------------

def test_a_full_export_verifies_and_is_complete(log: Log) -> None:
    report = log.verify(log.bundle())
    assert report.events == log.latest.size and report.completeness.startswith("complete")


def test_a_department_export_verifies_and_is_complete(log: Log) -> None:
    lines = log.bundle(AuditFilters(department_ids=frozenset({A})))
    report = log.verify(lines)
    assert report.events == sum(1 for event in log.events if event.department_id == A)
    assert "departments 901" in report.completeness
    assert not any(b'"department_id":902' in line for line in lines)  # nothing of B, only hashes


def test_a_time_range_export_verifies_with_its_boundary_events(log: Log) -> None:
    filters = AuditFilters(time_from=log.events[5].occurred_at, time_to=log.events[15].occurred_at)
    report = log.verify(log.bundle(filters))
    assert report.events == 10 and report.context == 2
    department = AuditFilters(time_from=log.events[5].occurred_at, time_to=log.events[15].occurred_at,
                              department_ids=frozenset({A, B, 12345}))
    assert log.verify(log.bundle(department)).completeness.startswith("complete")


def test_an_action_filter_is_verified_for_inclusion_only(log: Log) -> None:
    report = log.verify(log.bundle(AuditFilters(actions=("node.updated",), department_ids=frozenset({B}))))
    assert report.completeness.startswith("inclusion only")


# -- one test per way to cheat ----------------------------------------------------------------

def test_a_changed_byte_in_an_event(log: Log) -> None:
    lines = log.bundle()
    index = line_of(lines, log.seq(6))
    lines = edit(lines, index, lambda line: line.replace(b'"index":6', b'"index":7'))
    fails(log, lines, "altered", log.seq(6), f"seq {log.seq(6)} was altered")


def test_a_changed_byte_in_the_last_event(log: Log) -> None:
    lines = log.bundle()
    index = line_of(lines, log.seq(-1))
    lines = edit(lines, index, lambda line: line.replace(b'"index":9', b'"index":8'))
    fails(log, lines, "altered", log.seq(-1), "does not match the head")


def test_a_deleted_middle_event(log: Log) -> None:
    lines = log.bundle()
    del lines[line_of(lines, log.seq(7))]
    fails(log, lines, "missing", log.seq(7), f"seq {log.seq(7)} is missing")


def test_deleted_last_events(log: Log) -> None:
    lines = log.bundle()
    for seq in (log.seq(-1), log.seq(-2), log.seq(-3)):
        del lines[line_of(lines, seq)]
    fails(log, lines, "truncated", log.seq(-3), "were deleted")


def test_reordered_events(log: Log) -> None:
    lines = log.bundle()
    first, second = line_of(lines, log.seq(4)), line_of(lines, log.seq(5))
    lines[first], lines[second] = lines[second], lines[first]
    fails(log, lines, "reordered", log.seq(4), "out of order")


def test_an_injected_event(log: Log) -> None:
    lines = log.bundle()
    index = line_of(lines, log.seq(8))
    previous = json.loads(lines[index - 1])
    fake = forged(lines[index], actor_username="mallory", prev_hash=leaf_hash(lines[index - 1]).hex(),
                  department_id=None, department_seq=None, department_prev_hash=None)
    assert previous["seq"] == log.seq(8) - 1
    fails(log, [*lines[:index], fake, *lines[index:]], "injected", log.seq(8), "appears twice with different content")


def test_an_injected_event_with_the_rest_renumbered(log: Log) -> None:
    lines = log.bundle()
    index = line_of(lines, log.seq(8))
    fake = forged(lines[index], actor_username="mallory", prev_hash=leaf_hash(lines[index - 1]).hex())
    renumbered = [forged(line, seq=json.loads(line)["seq"] + 1) if not line.startswith(b'{"@"') else line
                  for line in lines[index:]]
    fails(log, [*lines[:index], fake, *renumbered], "injected", log.seq(8), "an event was injected")


def test_a_duplicated_event(log: Log) -> None:
    lines = log.bundle()
    index = line_of(lines, log.seq(3))
    fails(log, [*lines[:index + 1], lines[index], *lines[index + 1:]], "duplicated", log.seq(3), "appears twice")


def test_an_edited_checkpoint(log: Log) -> None:
    lines = log.bundle()
    header = json.loads(lines[0])
    header["checkpoint"] = header["checkpoint"].replace(f"\n{log.latest.size}\n", f"\n{log.latest.size + 1}\n", 1)
    fails(log, [canonical_json(header), *lines[1:]], "signature", None, "edited after it was signed")


def test_an_old_checkpoint_replayed_over_newer_events(log: Log) -> None:
    lines = log.bundle()
    header = json.loads(lines[0])
    header["checkpoint"] = log.first.note
    fails(log, [canonical_json(header), *lines[1:]], "stale-checkpoint", log.first.size + 1,
          "older checkpoint was substituted")


def test_an_old_export_is_genuine_but_not_complete_as_of_now(log: Log) -> None:
    """Two answers: what the bundle proves (genuine, with the consistency proof from its tree to the
    folder's newer checkpoint), and, separately, that it is not complete as of now."""
    old = log.bundle(checkpoint=log.first)
    alone = log.verify(old)
    assert alone.events == log.first.size and alone.current is None  # genuine; nothing newer known
    assert "AS OF NOW: unknown: no external checkpoint folder" in alone.summary()
    keys = [log.key.verifier]
    store = checkpoint_chain_verify(log.folder.notes(), keys, proofs=log.folder.proof)
    report = BundleVerifier(keys, store=store).verify(old)
    assert report.events == log.first.size and report.completeness.startswith("complete:")
    assert report.current is False
    summary = report.summary()
    assert summary.startswith(f"OK: {log.first.size} events verified against checkpoint #{log.first.number} ")
    assert summary.splitlines()[-1] == (
        f"AS OF NOW: NOT complete: the folder's latest checkpoint #{log.latest.number} (size {log.latest.size}, "
        f"{checkpoint_verify(log.latest.note, keys).time}) covers {log.latest.size - log.first.size} events after "
        f"this bundle's checkpoint #{log.first.number} (size {log.first.size}, "
        f"{checkpoint_verify(log.first.note, keys).time}) (seqs {log.first.size + 1}..{log.latest.size} are not in "
        f"it); its tree extends this bundle's: the consistency proof from #{log.first.number} ({log.first.size} "
        f"events) to #{log.latest.number} ({log.latest.size} events) was checked"
    )
    current = BundleVerifier(keys, store=store).verify(log.bundle())
    assert current.current is True
    assert current.summary().splitlines()[-1] == (
        f"AS OF NOW: complete: its checkpoint is the folder's latest (#{log.latest.number})"
    )


def test_an_old_export_stays_current_while_only_heartbeats_followed(log: Log, publish: Publish) -> None:
    publish()  # a heartbeat: a newer checkpoint of the same size
    keys = [log.key.verifier]
    store = checkpoint_chain_verify(log.folder.notes(), keys, proofs=log.folder.proof)
    report = BundleVerifier(keys, store=store).verify(log.bundle())
    assert report.current is True and "covers the same" in report.summary().splitlines()[-1]


def test_a_tampered_old_export_is_not_genuine(log: Log) -> None:
    old = log.bundle(checkpoint=log.first)
    index = line_of(old, log.seq(3))
    fails(log, edit(old, index, lambda line: forged(line, actor_username="mallory")), "altered", log.seq(3),
          store=True)


def test_two_checkpoints_of_one_size_with_different_roots(log: Log) -> None:
    signed = checkpoint_verify(log.latest.note, [log.key.verifier])
    split = dataclasses.replace(signed, root=bytes(32))  # a second view of the same size, validly signed
    lines = log.bundle()
    header = json.loads(lines[0])
    header["checkpoint"] = checkpoint_sign(split, log.key)
    fails(log, [canonical_json(header), *lines[1:]], "split-view", None, "differs from the store's", store=True)
    later = dataclasses.replace(signed, number=signed.number + 1, root=bytes(32), previous=note_hash(log.latest.note))
    log.folder.write(later.number, checkpoint_sign(later, log.key))
    with pytest.raises(VerificationFailure, match="both cover .* but have different roots") as failure:
        checkpoint_chain_verify(log.folder.notes(), [log.key.verifier], from_genesis=False)
    assert failure.value.kind == "split-view"


def test_an_unknown_key(log: Log) -> None:
    fails(log, log.bundle(), "unknown-key", None, "not a trusted key", key=signing_key_generate(ORIGIN))


def test_one_event_dropped_from_a_department_export(log: Log) -> None:
    lines = log.bundle(AuditFilters(department_ids=frozenset({A})))
    of_a = [event.seq for event in log.events if event.department_id == A]
    index = line_of(lines, of_a[3])
    fails(log, edit(lines, index, hidden), "incomplete", of_a[4], "dropped from the export")
    fails(log, [*lines[:index], *lines[index + 1:]], "missing", of_a[3], "dropped")


def test_the_last_event_dropped_from_a_department_export(log: Log) -> None:
    lines = log.bundle(AuditFilters(department_ids=frozenset({A})))
    last_of_a = [event.seq for event in log.events if event.department_id == A][-1]
    fails(log, edit(lines, line_of(lines, last_of_a), hidden), "incomplete", None,
          "dropped from the end of the export")


def test_a_department_hidden_as_if_it_had_no_events(log: Log) -> None:
    lines = log.bundle(AuditFilters(department_ids=frozenset({A})))
    proof = json.loads(lines[1])
    proof["items"] = [item if "node" in item else {"node": [0, leaf_hash(canonical_json(item["entry"])).hex()]}
                      for item in proof["items"]]
    fails(log, [lines[0], canonical_json(proof), *lines[2:]], "incomplete", None, "absence is not proven")


def test_the_boundary_event_dropped_from_a_time_range_export(log: Log) -> None:
    filters = AuditFilters(time_from=log.events[5].occurred_at, time_to=log.events[15].occurred_at)
    lines = log.bundle(filters)
    context = next(index for index, line in enumerate(lines) if line.startswith(b'{"@":"context"'))
    record = json.loads(lines[context])["record"].encode()
    fails(log, edit(lines, context, lambda _: hidden(record)), "incomplete", log.seq(4), "dropped from the export")


def test_an_in_range_event_passed_off_as_a_boundary(log: Log) -> None:
    filters = AuditFilters(time_from=log.events[5].occurred_at, time_to=log.events[15].occurred_at)
    lines = log.bundle(filters)
    index = line_of(lines, log.seq(5))
    lines = edit(lines, index, lambda line: canonical_json({"@": "context", "record": line.decode()}))
    fails(log, lines, "scope", log.seq(5), "marked as context")


# -- the command line ---------------------------------------------------------------------------

def test_the_command_line_verifier_passes_and_fails_without_django(log: Log, tmp_path: Path) -> None:
    key_file = tmp_path / "audit.pub"
    key_file.write_text(log.key.verifier.vkey())
    bundle = tmp_path / "bundle.jsonl"
    bundle.write_bytes(b"\n".join(log.bundle()) + b"\n")
    result = subprocess.run(
        [sys.executable, "-m", "audit.verify", str(bundle), "--key", str(key_file), "--checkpoints",
         str(log.folder.root)],
        capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(f"OK: {log.latest.size} events verified")
    lines = bundle.read_bytes().splitlines()
    del lines[line_of(lines, log.seq(7))]
    bundle.write_bytes(b"\n".join(lines) + b"\n")
    result = subprocess.run(
        [sys.executable, "-m", "audit.verify", str(bundle), "--key", log.key.verifier.vkey()],
        capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 1
    assert result.stdout.startswith(f"FAILED seq {log.seq(7)} [missing]: seq {log.seq(7)} is missing")


def test_the_command_line_verifier_gives_two_answers_with_their_exit_codes(log: Log, tmp_path: Path) -> None:
    def verify(bundle: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "audit.verify", str(bundle), "--key", log.key.verifier.vkey(), "--checkpoints",
             str(log.folder.root), *extra],
            capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parents[2],
        )

    old = tmp_path / "old.jsonl"
    old.write_bytes(b"\n".join(log.bundle(checkpoint=log.first)) + b"\n")
    result = verify(old)
    assert result.returncode == 3, result.stdout + result.stderr  # genuine, not complete as of now
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"OK: {log.first.size} events verified against checkpoint #{log.first.number} ")
    assert lines[-1].startswith(f"AS OF NOW: NOT complete: the folder's latest checkpoint #{log.latest.number} ")
    assert "the consistency proof from" in lines[-1] and "FAILED" not in result.stdout
    assert verify(old, "--allow-stale").returncode == 0  # only asks whether it is genuine
    current = tmp_path / "current.jsonl"
    current.write_bytes(b"\n".join(log.bundle()) + b"\n")
    result = verify(current)
    assert result.returncode == 0 and result.stdout.splitlines()[-1].startswith("AS OF NOW: complete")
    tampered = log.bundle(checkpoint=log.first)
    tampered = edit(tampered, line_of(tampered, log.seq(2)), lambda line: forged(line, action="allocation.approved"))
    old.write_bytes(b"\n".join(tampered) + b"\n")
    result = verify(old)
    assert result.returncode == 1 and result.stdout.startswith(f"FAILED seq {log.seq(2)} [altered]")


def test_the_verifier_module_imports_nothing_from_django() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import sys, audit.verify; "
         "print(sorted(m for m in sys.modules if m.split('.')[0] == 'django'))"],
        capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parents[2],
    )
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def test_the_command_line_verifier_rejects_bad_usage(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "audit.verify", str(tmp_path / "missing.jsonl"), "--key", "not a key"],
        capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 2 and "cannot read key" in result.stderr

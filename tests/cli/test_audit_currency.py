"""``gpuportal audit verify`` gives a bundle two answers, as ``python -m audit.verify`` does:
genuine (as of the bundle's own checkpoint), and complete as of now, against a newer signed
checkpoint fetched from the portal (here a small stand-in HTTP server) or given with
``--checkpoint``. An older bundle is genuine but NOT complete as of now (exit 10), with the
consistency proof to the newer tree checked; a newer checkpoint that does not verify, or whose
tree does not extend the bundle's, fails (exit 8)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from audit.integrity.checkpoint import ZERO_HASH, Checkpoint, checkpoint_sign
from audit.integrity.keys import SigningKey, signing_key_generate
from audit.integrity.merkle import reference_root, subtrees_covering
from cli.exits import Exit
from tests.cli.conftest import Cli

ORIGIN = "test.gpuportal/audit"
GENESIS = "0" * 64


def records(count: int) -> list[bytes]:
    """``count`` chained records, as stored (only the fields the client's checker reads, and one more)."""
    out: list[bytes] = []
    prev = GENESIS
    for seq in range(1, count + 1):
        record = json.dumps({
            "seq": seq, "prev_hash": prev, "occurred_at": f"2025-01-01T00:{seq // 60:02d}:{seq % 60:02d}Z",
            "department_id": None, "department_seq": None, "department_prev_hash": None, "outcome": "success",
        }, separators=(",", ":")).encode("ascii")
        prev = leaf(record).hex()
        out.append(record)
    return out


def leaf(record: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + record).digest()


def note(key: SigningKey, log: list[bytes], size: int, number: int) -> str:
    leaves = [leaf(record) for record in log[:size]]
    return checkpoint_sign(Checkpoint(
        origin=ORIGIN, size=size, root=reference_root(leaves), head=leaves[-1], departments_size=0,
        departments_root=hashlib.sha256(b"").digest(), number=number, previous=ZERO_HASH,
        time=f"2025-01-01T01:00:{number:02d}Z",
    ), key)


def bundle(key: SigningKey, log: list[bytes], size: int, number: int) -> bytes:
    header = {"@": "bundle", "version": 1, "checkpoint": note(key, log, size, number), "scope": {},
              "exported_at": "2025-01-01T01:00:00Z"}
    lines = [json.dumps(header, separators=(",", ":")).encode(), *log[:size], json.dumps({"@": "end", "events": size, "context": 0}, separators=(",", ":")).encode()]
    return b"\n".join(lines) + b"\n"


def nodes(log: list[bytes], first: int, second: int) -> list[list[Any]]:
    leaves = [leaf(record) for record in log]
    return [[index << level, level, reference_root(leaves[index << level:(index + 1) << level]).hex()]
            for level, index in subtrees_covering(first, second)]


class FakePortal:
    """Serves ``/api/v1/audit/checkpoints/latest/`` and ``.../consistency/`` from what a test sets."""

    def __init__(self) -> None:
        self.latest: str | None = None
        self.proof: list[list[Any]] | None = None
        self.asked: list[tuple[int, int]] = []
        portal = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
                url = urlsplit(self.path)
                if url.path == "/api/v1/audit/checkpoints/latest/" and portal.latest is not None:
                    self._answer(200, {"number": 0, "size": 0, "root_hash": "", "created_at": "", "note": portal.latest})
                elif url.path == "/api/v1/audit/checkpoints/consistency/" and portal.proof is not None:
                    query = parse_qs(url.query)
                    portal.asked.append((int(query["first"][0]), int(query["second"][0])))
                    self._answer(200, {"first": portal.asked[-1][0], "second": portal.asked[-1][1],
                                       "nodes": portal.proof})
                else:
                    self._answer(404, {"error": {"code": "not_found", "message": "Not found."}})

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def fake_portal() -> Iterator[FakePortal]:
    portal = FakePortal()
    thread = threading.Thread(target=portal.server.serve_forever, daemon=True)
    thread.start()
    yield portal
    portal.server.shutdown()
    portal.server.server_close()


@pytest.fixture
def key() -> SigningKey:
    return signing_key_generate(ORIGIN)


def verify(cli: Cli, portal: FakePortal | None, path: Path, key: SigningKey, *extra: str) -> Any:
    env = {"GPUPORTAL_URL": portal.url, "GPUPORTAL_TOKEN": "t0ken"} if portal else {}
    return cli("audit", "verify", str(path), "--key", key.verifier.vkey(), *extra, env=env)


def test_a_current_bundle_is_genuine_and_complete_as_of_the_portals_latest(
    cli: Cli, fake_portal: FakePortal, key: SigningKey, tmp_path: Path
) -> None:
    log = records(11)
    (path := tmp_path / "b.jsonl").write_bytes(bundle(key, log, 11, 4))
    fake_portal.latest = note(key, log, 11, 4)
    result = verify(cli, fake_portal, path, key)
    assert result.exit_code == 0, result.output
    assert "VERIFIED bundle" in result.stdout
    assert "AS OF NOW: complete: its checkpoint is the portal's latest (#4)" in result.stdout


def test_an_older_bundle_is_genuine_but_not_complete_as_of_now_with_the_consistency_proof_checked(
    cli: Cli, fake_portal: FakePortal, key: SigningKey, tmp_path: Path
) -> None:
    log = records(23)
    (path := tmp_path / "old.jsonl").write_bytes(bundle(key, log, 13, 3))
    fake_portal.latest, fake_portal.proof = note(key, log, 23, 5), nodes(log, 13, 23)
    result = verify(cli, fake_portal, path, key)
    assert result.exit_code == int(Exit.NOT_CURRENT) == 10, result.output
    assert "VERIFIED bundle: 13 events (seq 1..13)" in result.stdout
    line = result.stdout.splitlines()[-1]
    assert line.startswith("AS OF NOW: NOT complete: the portal's latest checkpoint #5 (size 23, ")
    assert "covers 10 events after this bundle's checkpoint #3 (size 13, " in line
    assert "(seqs 14..23 are not in it)" in line
    assert "the consistency proof from 13 to 23 events was checked" in line
    assert fake_portal.asked == [(13, 23)]
    stale = verify(cli, fake_portal, path, key, "--allow-stale", "-o", "json")
    assert stale.exit_code == 0, stale.output
    report = json.loads(stale.stdout)
    assert report["verified"] is True and report["current"] is False
    assert report["latest_checkpoint"]["size"] == 23 and report["latest_checkpoint"]["number"] == 5


def test_without_a_consistency_proof_an_older_bundle_is_still_not_complete(
    cli: Cli, fake_portal: FakePortal, key: SigningKey, tmp_path: Path
) -> None:
    log = records(9)
    (path := tmp_path / "old.jsonl").write_bytes(bundle(key, log, 8, 1))
    fake_portal.latest = note(key, log, 9, 2)
    result = verify(cli, fake_portal, path, key)
    assert result.exit_code == 10, result.output
    assert "(seq 9 is not in it); no consistency proof was offered" in result.stdout


def test_a_newer_tree_that_does_not_extend_the_bundles_fails_as_rewritten(
    cli: Cli, fake_portal: FakePortal, key: SigningKey, tmp_path: Path
) -> None:
    log = records(20)
    (path := tmp_path / "old.jsonl").write_bytes(bundle(key, log, 12, 2))
    other = records(12)[:11] + [log[11].replace(b'"success"', b'"denied"')] + log[12:]
    fake_portal.latest, fake_portal.proof = note(key, other, 20, 3), nodes(other, 12, 20)
    result = verify(cli, fake_portal, path, key)
    assert result.exit_code == Exit.VERIFY_FAILED, result.output
    assert "FAILED seq 13 [rewritten]" in result.stderr and "AS OF NOW" not in result.stdout


def test_a_tampered_bundle_is_not_genuine(cli: Cli, fake_portal: FakePortal, key: SigningKey, tmp_path: Path) -> None:
    log = records(10)
    fake_portal.latest = note(key, log, 10, 2)
    (path := tmp_path / "b.jsonl").write_bytes(bundle(key, log, 10, 2).replace(b'"success"', b'"denied"', 1))
    result = verify(cli, fake_portal, path, key)
    assert result.exit_code == Exit.VERIFY_FAILED, result.output
    assert "FAILED seq" in result.stderr and "[altered]" in result.stderr


def test_a_newer_checkpoint_whose_signature_does_not_verify_is_an_error_never_trusted(
    cli: Cli, fake_portal: FakePortal, key: SigningKey, tmp_path: Path
) -> None:
    log = records(15)
    (path := tmp_path / "old.jsonl").write_bytes(bundle(key, log, 10, 2))
    fake_portal.latest = note(key, log, 15, 3).replace("\n15\n", "\n10\n", 1)  # edited after signing
    result = verify(cli, fake_portal, path, key)
    assert result.exit_code == Exit.VERIFY_FAILED, result.output
    assert "[signature]" in result.stderr and "the portal's latest checkpoint is not trusted" in result.stderr
    stranger = signing_key_generate(ORIGIN)
    fake_portal.latest = note(stranger, log, 15, 3)
    result = verify(cli, fake_portal, path, key)
    assert result.exit_code == Exit.VERIFY_FAILED and "[unknown-key]" in result.stderr
    (newer := tmp_path / "latest").write_text(note(stranger, log, 15, 3))
    result = verify(cli, None, path, key, "--checkpoint", str(newer))
    assert result.exit_code == Exit.VERIFY_FAILED and "[unknown-key]" in result.stderr


def test_a_checkpoint_file_answers_offline_and_a_same_size_other_root_is_a_split_view(
    cli: Cli, key: SigningKey, tmp_path: Path
) -> None:
    log = records(7)
    (path := tmp_path / "old.jsonl").write_bytes(bundle(key, log, 5, 1))
    (newer := tmp_path / "latest").write_text(note(key, log, 7, 2))
    result = verify(cli, None, path, key, "--checkpoint", str(newer))
    assert result.exit_code == 10, result.output
    assert "AS OF NOW: NOT complete: the checkpoint in latest checkpoint #2 (size 7, " in result.stdout
    assert "(seqs 6..7 are not in it)" in result.stdout
    forged = [*log[:4], log[4].replace(b'"success"', b'"denied"'), *log[5:]]
    (newer := tmp_path / "forged").write_text(note(key, forged, 5, 2))
    result = verify(cli, None, path, key, "--checkpoint", str(newer))
    assert result.exit_code == Exit.VERIFY_FAILED and "[split-view]" in result.stderr


def test_without_a_portal_or_a_checkpoint_the_answer_is_unknown_and_a_genuine_bundle_exits_0(
    cli: Cli, fake_portal: FakePortal, key: SigningKey, tmp_path: Path
) -> None:
    log = records(6)
    (path := tmp_path / "b.jsonl").write_bytes(bundle(key, log, 6, 1))
    alone = verify(cli, None, path, key)
    assert alone.exit_code == 0, alone.output
    assert alone.stdout.splitlines()[-1].startswith("AS OF NOW: unknown: the portal's latest checkpoint could not")
    fake_portal.latest = note(key, records(9), 9, 2)
    offline = verify(cli, fake_portal, path, key, "--offline")
    assert offline.exit_code == 0 and "AS OF NOW: unknown: --offline" in offline.stdout

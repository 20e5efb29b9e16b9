"""``gpuportal audit export --verify`` against a live portal's real exports, the client's checker
agreeing with the portal's offline verifier (``python -m audit.verify``) on intact and tampered
files alike."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from audit import verify as portal_verifier
from audit.integrity.keys import signing_key_generate
from tests.cli.conftest import Cli, Portal

pytestmark = pytest.mark.django_db(transaction=True)


def some_history(portal: Portal) -> None:
    for verb in ("approve", "reject"):
        response = portal.api("nlp_member", "POST", "allocations/", json={
            "project": portal.world.llm.pk, "flavor": portal.world.a100.pk, "quantity": 1,
            "justification": "audit", **portal.world.window(days=2),
        })
        portal.api("nlp_admin", "POST", f"allocations/{response.json()['id']}/{verb}/", json={"comment": "x"})


def portal_verdict(path: Path, key: str) -> int:
    return portal_verifier.main([str(path), "--key", key])


def event_lines(path: Path) -> list[int]:
    return [i for i, line in enumerate(path.read_bytes().splitlines()) if not line.startswith(b'{"@":')]


def rewrite(path: Path, index: int, change: bytes | None) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    if change is None:
        del lines[index]
    else:
        lines[index] = change
    path.write_bytes(b"".join(lines))


def test_the_auditor_exports_a_bundle_that_verifies_here_and_with_the_portals_verifier(
    portal: Portal, cli: Cli, verifier_key: str, tmp_path: Path
) -> None:
    some_history(portal)
    cli.login(portal, "auditor")
    out = tmp_path / "audit.jsonl"
    result = cli("audit", "export", "--verify", "--key", verifier_key, "--file", str(out), "-o", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["verified"] is True and report["complete"] is True and report["format"] == "bundle"
    assert report["events"] >= 6 and report["checkpoint"]["size"] == report["last_seq"]
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    assert portal_verdict(out, verifier_key) == 0


def test_to_standard_output_the_export_is_written_and_the_report_goes_to_standard_error(
    portal: Portal, cli: Cli, verifier_key: str
) -> None:
    some_history(portal)
    cli.login(portal, "auditor")
    result = cli("audit", "export", "--verify", "--key", verifier_key)
    assert result.exit_code == 0, result.stderr
    first, *_, last = result.stdout.splitlines()
    assert json.loads(first)["@"] == "bundle" and json.loads(last)["@"] == "end"
    assert result.stderr.startswith("Wrote") is False and "VERIFIED bundle" in result.stderr


def test_without_a_key_the_portals_served_keys_are_used_with_a_warning(portal: Portal, cli: Cli, tmp_path: Path) -> None:
    some_history(portal)
    cli.login(portal, "auditor")
    result = cli("audit", "export", "--verify", "--file", str(tmp_path / "a.jsonl"))
    assert result.exit_code == 0, result.stderr
    assert "warning: checking against the keys the portal serves" in result.stderr
    assert "VERIFIED bundle" in result.stdout


def test_a_time_range_is_proved_complete_with_its_boundary_events(
    portal: Portal, cli: Cli, verifier_key: str, tmp_path: Path
) -> None:
    some_history(portal)
    start = datetime.datetime.now(datetime.UTC)
    some_history(portal)
    cli.login(portal, "auditor")
    out = tmp_path / "range.jsonl"
    result = cli("audit", "export", "--verify", "--key", verifier_key, "--from", start.isoformat(), "--file", str(out))
    assert result.exit_code == 0, result.stderr
    assert "complete: every event of the range" in result.stdout
    assert b'{"@":"context"' in out.read_bytes()
    assert portal_verdict(out, verifier_key) == 0


@pytest.mark.parametrize(
    ("tamper", "kind"),
    [
        ("edit", "altered"),
        ("delete", "missing"),
        ("swap", "reordered"),
    ],
)
def test_a_tampered_bundle_fails_with_exit_8_as_it_does_with_the_portals_verifier(
    portal: Portal, cli: Cli, verifier_key: str, tmp_path: Path, tamper: str, kind: str
) -> None:
    some_history(portal)
    cli.login(portal, "auditor")
    out = tmp_path / "audit.jsonl"
    assert cli("audit", "export", "--key", verifier_key, "--file", str(out)).exit_code == 0
    events = event_lines(out)
    middle = events[len(events) // 2]
    lines = out.read_bytes().splitlines(keepends=True)
    if tamper == "edit":
        rewrite(out, middle, lines[middle].replace(b'"v":1', b'"v":1 ', 1).replace(b'"outcome":"', b'"outcome":"X', 1))
    elif tamper == "delete":
        rewrite(out, middle, None)
    else:
        lines[middle], lines[middle + 1] = lines[middle + 1], lines[middle]
        out.write_bytes(b"".join(lines))
    result = cli("audit", "verify", str(out), "--key", verifier_key)
    assert result.exit_code == 8
    assert f"[{kind}]" in result.stderr and result.stderr.startswith("error: FAILED seq ")
    assert portal_verdict(out, verifier_key) == 1


def test_a_bundle_cut_short_or_signed_by_another_key_fails(
    portal: Portal, cli: Cli, verifier_key: str, tmp_path: Path
) -> None:
    some_history(portal)
    cli.login(portal, "auditor")
    out = tmp_path / "audit.jsonl"
    assert cli("audit", "export", "--key", verifier_key, "--file", str(out)).exit_code == 0
    other = signing_key_generate("cli-tests/audit").verifier.vkey()
    assert "[unknown-key]" in cli("audit", "verify", str(out), "--key", other).stderr
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:-3] + lines[-1:]))
    result = cli("audit", "verify", str(out), "--key", verifier_key)
    assert result.exit_code == 8 and "[truncated]" in result.stderr


def test_json_lines_exports_have_their_chain_checked(portal: Portal, cli: Cli, tmp_path: Path) -> None:
    some_history(portal)
    cli.login(portal, "auditor")
    out = tmp_path / "events.jsonl"
    result = cli("audit", "export", "--format", "jsonl", "--verify", "--file", str(out))
    assert result.exit_code == 0, result.stderr
    assert "chain and department links intact" in result.stdout
    lines = out.read_bytes().splitlines(keepends=True)
    middle = len(lines) // 2
    lines[middle] = lines[middle].replace(b'"nonce":"', b'"nonce":"0', 1)
    out.write_bytes(b"".join(lines))
    tampered = cli("audit", "verify", str(out))
    assert tampered.exit_code == 8 and "[altered]" in tampered.stderr


def test_a_department_export_proves_inclusion_and_says_what_it_leaves_to_the_full_verifier(
    portal: Portal, cli: Cli, verifier_key: str, tmp_path: Path
) -> None:
    some_history(portal)
    cli.login(portal, "auditor")
    out = tmp_path / "nlp.jsonl"
    result = cli("audit", "export", "--department", "nlp", "--verify", "--key", verifier_key, "--file", str(out))
    assert result.exit_code == 0, result.stderr
    assert "run python -m audit.verify" in result.stdout
    assert portal_verdict(out, verifier_key) == 0


def test_a_researcher_cannot_export_the_audit_log(portal: Portal, cli: Cli) -> None:
    cli.login(portal, "nlp_member")
    result = cli("audit", "export", "--format", "jsonl")
    assert result.exit_code == 4 and "HTTP 404" in result.stderr
    assert cli("audit", "export", "--format", "csv", "--verify").exit_code == 2

"""The client against a portal started as ``make run`` starts it (a runserver process on a
database of its own, loaded with ``seed_demo``): alice requests GPUs and waits while bob approves,
and carol exports the audit log with ``--verify``; the client's checker agrees with the portal's
offline verifier (``python -m audit.verify``) on intact and tampered exports alike."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from audit import verify as portal_verifier
from audit.integrity.keys import signing_key_generate
from tests.cli.conftest import Cli
from tests.cli.demo_server import ROOT, DemoServer

FLAVOR = "a100-mig-1g-10gb"


def call(demo: DemoServer, username: str, method: str, path: str, **kwargs: Any) -> Any:
    response = requests.request(method, f"{demo.url}/api/v1/{path}", timeout=30,
                                headers={"Authorization": f"Token {demo.token(username)}"}, **kwargs)
    assert response.status_code < 300, response.text
    return response.json()


def named(demo: DemoServer, path: str, field: str, value: str) -> int:
    return next(int(item["id"]) for item in call(demo, "alice", "GET", path)["results"] if item[field] == value)


def some_history(demo: DemoServer) -> None:
    """alice asks twice; bob approves one (which alice then releases) and rejects the other."""
    body = {"project": named(demo, "projects/", "slug", "nlp-llm"), "flavor": named(demo, "flavors/", "name", FLAVOR),
            "quantity": 1, "justification": "audit trail", "ends_at": (datetime.datetime.now(datetime.UTC)
                                                                      + datetime.timedelta(days=1)).isoformat()}
    for verb in ("approve", "reject"):
        allocation = call(demo, "alice", "POST", "allocations/", json=body)
        call(demo, "bob", "POST", f"allocations/{allocation['id']}/{verb}/", json={"comment": "decided"})
        if verb == "approve":
            call(demo, "alice", "POST", f"allocations/{allocation['id']}/release/", json={})


def test_alice_waits_for_bobs_approval_and_then_lists_her_allocations(demo: DemoServer, cli: Cli) -> None:
    cli.demo_login(demo, "alice")

    def bob_approves() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            waiting = [a for a in call(demo, "bob", "GET", "allocations/", params={"state": "pending"})["results"]
                       if a["justification"] == "CLI --wait"]
            if waiting:
                call(demo, "bob", "POST", f"allocations/{waiting[0]['id']}/approve/", json={"comment": "enjoy"})
                return
            time.sleep(0.3)

    bob = threading.Thread(target=bob_approves, daemon=True)
    bob.start()
    result = cli("request", "create", "--project", "nlp-llm", "--flavor", FLAVOR, "--count", "2", "--end", "+3d",
                 "--reason", "CLI --wait", "--wait", "--timeout", "60", "-o", "json")
    bob.join(5)
    assert result.exit_code == 0, result.stderr
    granted = json.loads(result.stdout)
    assert (granted["state"], granted["decided_by"], granted["quantity"]) == ("active", "bob", 2)
    listed = cli("allocations", "list", "--state", "active", "--mine")
    assert listed.exit_code == 0, listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    assert str(granted["id"]) in rows and FLAVOR in rows[str(granted["id"])]
    assert cli("allocations", "release", str(granted["id"])).exit_code == 0


def portal_verdict(path: Path, key: str) -> int:
    return portal_verifier.main([str(path), "--key", key])


def event_indexes(path: Path) -> list[int]:
    return [i for i, line in enumerate(path.read_bytes().splitlines()) if not line.startswith(b'{"@":')]


def test_carol_exports_a_bundle_that_verifies_here_and_with_the_portals_verifier(
    demo: DemoServer, cli: Cli, tmp_path: Path
) -> None:
    some_history(demo)
    key = demo.verifier_key()
    cli.demo_login(demo, "carol")
    out = tmp_path / "audit.jsonl"
    result = cli("audit", "export", "--verify", "--key", key, "--file", str(out), "-o", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["verified"] is True and report["complete"] is True and report["format"] == "bundle"
    assert report["events"] >= 6 and report["first_seq"] == 1 and report["checkpoint"]["size"] == report["last_seq"]
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    assert portal_verdict(out, key) == 0


def test_to_standard_output_the_export_is_written_and_the_report_goes_to_standard_error(
    demo: DemoServer, cli: Cli
) -> None:
    cli.demo_login(demo, "carol")
    result = cli("audit", "export", "--verify", "--key", demo.verifier_key())
    assert result.exit_code == 0, result.stderr
    first, *_, last = result.stdout.splitlines()
    assert json.loads(first)["@"] == "bundle" and json.loads(last)["@"] == "end"
    assert "VERIFIED bundle" in result.stderr and "VERIFIED" not in result.stdout


def test_without_a_key_the_keys_the_portal_serves_are_used_with_a_warning(
    demo: DemoServer, cli: Cli, tmp_path: Path
) -> None:
    cli.demo_login(demo, "carol")
    result = cli("audit", "export", "--verify", "--file", str(tmp_path / "a.jsonl"))
    assert result.exit_code == 0, result.stderr
    assert "warning: checking against the keys the portal serves" in result.stderr
    assert "VERIFIED bundle" in result.stdout


def test_a_time_range_is_proved_complete_with_its_boundary_events(demo: DemoServer, cli: Cli, tmp_path: Path) -> None:
    some_history(demo)
    start = datetime.datetime.now(datetime.UTC)
    some_history(demo)
    key = demo.verifier_key()
    cli.demo_login(demo, "carol")
    out = tmp_path / "range.jsonl"
    result = cli("audit", "export", "--verify", "--key", key, "--from", start.isoformat(), "--file", str(out))
    assert result.exit_code == 0, result.stderr
    assert "complete: every event of the range" in result.stdout
    assert b'{"@":"context"' in out.read_bytes()
    assert portal_verdict(out, key) == 0


@pytest.mark.parametrize(("tamper", "kind"), [("edit", "altered"), ("delete", "missing"), ("swap", "reordered")])
def test_a_tampered_bundle_fails_with_exit_8_as_it_does_with_the_portals_verifier(
    demo: DemoServer, cli: Cli, tmp_path: Path, tamper: str, kind: str
) -> None:
    some_history(demo)
    key = demo.verifier_key()
    cli.demo_login(demo, "carol")
    out = tmp_path / "audit.jsonl"
    assert cli("audit", "export", "--file", str(out)).exit_code == 0
    lines = out.read_bytes().splitlines(keepends=True)
    middle = event_indexes(out)[len(event_indexes(out)) // 2]
    if tamper == "edit":
        lines[middle] = lines[middle].replace(b'"outcome":"', b'"outcome":"X', 1)
    elif tamper == "delete":
        del lines[middle]
    else:
        lines[middle], lines[middle + 1] = lines[middle + 1], lines[middle]
    out.write_bytes(b"".join(lines))
    result = cli("audit", "verify", str(out), "--key", key)
    assert result.exit_code == 8
    assert result.stderr.startswith("error: FAILED seq ") and f"[{kind}]" in result.stderr
    assert portal_verdict(out, key) == 1


def test_a_bundle_cut_short_or_signed_by_an_untrusted_key_fails(demo: DemoServer, cli: Cli, tmp_path: Path) -> None:
    key = demo.verifier_key()
    cli.demo_login(demo, "carol")
    out = tmp_path / "audit.jsonl"
    assert cli("audit", "export", "--file", str(out)).exit_code == 0
    other = signing_key_generate("gpuportal/audit").verifier.vkey()
    untrusted = cli("audit", "verify", str(out), "--key", other)
    assert untrusted.exit_code == 8 and "[unknown-key]" in untrusted.stderr
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:-3] + lines[-1:]))
    cut = cli("audit", "verify", str(out), "--key", key)
    assert cut.exit_code == 8 and "[truncated]" in cut.stderr
    assert portal_verdict(out, key) == 1


def test_json_lines_exports_have_their_chain_checked(demo: DemoServer, cli: Cli, tmp_path: Path) -> None:
    some_history(demo)
    cli.demo_login(demo, "carol")
    out = tmp_path / "events.jsonl"
    result = cli("audit", "export", "--format", "jsonl", "--verify", "--file", str(out))
    assert result.exit_code == 0, result.stderr
    assert "chain and department links intact" in result.stdout
    lines = out.read_bytes().splitlines(keepends=True)
    lines[len(lines) // 2] = lines[len(lines) // 2].replace(b'"nonce":"', b'"nonce":"0', 1)
    out.write_bytes(b"".join(lines))
    tampered = cli("audit", "verify", str(out))
    assert tampered.exit_code == 8 and "[altered]" in tampered.stderr


def test_a_department_export_proves_inclusion_and_names_the_full_verifier_for_completeness(
    demo: DemoServer, cli: Cli, tmp_path: Path
) -> None:
    key = demo.verifier_key()
    cli.demo_login(demo, "carol")
    out = tmp_path / "nlp.jsonl"
    result = cli("audit", "export", "--department", "nlp", "--verify", "--key", key, "--file", str(out))
    assert result.exit_code == 0, result.stderr
    assert "run python -m audit.verify" in result.stdout
    assert portal_verdict(out, key) == 0


def test_a_researcher_cannot_export_the_audit_log(demo: DemoServer, cli: Cli) -> None:
    cli.demo_login(demo, "alice")
    result = cli("audit", "export", "--format", "jsonl")
    assert result.exit_code == 4 and "HTTP 404" in result.stderr
    assert cli("audit", "export", "--format", "csv", "--verify").exit_code == 2


def test_the_installed_entry_point_runs_as_its_own_process_with_the_environment_only(
    demo: DemoServer, tmp_path: Path
) -> None:
    env = {"PATH": os.environ.get("PATH", ""), "XDG_CONFIG_HOME": str(tmp_path / "empty"),
           "GPUPORTAL_URL": demo.url, "GPUPORTAL_TOKEN": demo.token("bob")}
    done = subprocess.run([sys.executable, "-m", "cli", "quotas", "show", "--department", "nlp", "-o", "yaml"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    quotas = yaml.safe_load(done.stdout)
    assert {q["department"] for q in quotas} == {"nlp"} and any(q["flavor"] == FLAVOR for q in quotas)
    refused = subprocess.run([sys.executable, "-m", "cli", "whoami"], cwd=ROOT, capture_output=True, text=True,
                             env={**env, "GPUPORTAL_TOKEN": "not-a-token"}, timeout=60, check=False)
    assert refused.returncode == 3 and "error:" in refused.stderr

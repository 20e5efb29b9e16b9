"""The client's commands against a live portal: sign-in and contexts, lists in every format, the
API's refusals as exit codes with their messages, and the environment overriding the file."""

from __future__ import annotations

import datetime
import json
import stat
from typing import Any

import pytest
import yaml

from allocations.models import Allocation, AllocationState
from kernel.clock import clock_now
from tests.cli.conftest import Cli, Portal

pytestmark = pytest.mark.django_db(transaction=True)


def submit(portal: Portal, persona: str = "nlp_member", *, count: int = 1) -> int:
    response = portal.api(persona, "POST", "allocations/", json={
        "project": portal.world.llm.pk, "flavor": portal.world.a100.pk, "quantity": count,
        "justification": "tests", **portal.world.window(days=3),
    })
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def test_login_with_a_password_saves_a_private_context_that_whoami_uses(portal: Portal, cli: Cli) -> None:
    result = cli("login", "--url", portal.url, "--username", "nlp_member", "--context", "lab", input="pw-nlp_member\n")
    assert result.exit_code == 0, result.stderr
    assert stat.S_IMODE(cli.config_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(cli.config_file.parent.stat().st_mode) == 0o700
    saved = yaml.safe_load(cli.config_file.read_text())
    assert saved["current-context"] == "lab" and saved["contexts"]["lab"]["url"] == portal.url
    whoami = cli("whoami", "-o", "json")
    assert whoami.exit_code == 0, whoami.stderr
    me = json.loads(whoami.stdout)
    assert me["username"] == "nlp_member" and me["context"] == "lab"
    assert [m["role"] for m in me["memberships"]] == ["researcher"]


def test_login_refuses_a_wrong_password_or_token_with_exit_3_and_saves_nothing(portal: Portal, cli: Cli) -> None:
    wrong_password = cli("login", "--url", portal.url, "--username", "nlp_member", input="nope\n")
    assert wrong_password.exit_code == 3
    assert "HTTP 401" in wrong_password.stderr
    scripted = cli("login", "--url", portal.url, "--username", "nlp_member", "--password-stdin", input="nope\n")
    assert scripted.exit_code == 3
    wrong_token = cli("login", "--url", portal.url, "--token-stdin", input="0123456789abcdef\n")
    assert wrong_token.exit_code == 3
    assert not cli.config_file.exists()


def test_contexts_are_listed_switched_and_deleted(portal: Portal, cli: Cli) -> None:
    cli.login(portal, "nlp_member", "--context", "member")
    cli.login(portal, "nlp_admin", "--context", "admin")
    listed = json.loads(cli("context", "list", "-o", "json").stdout)
    assert [(c["name"], c["current"]) for c in listed] == [("admin", True), ("member", False)]
    assert cli("context", "use", "member").exit_code == 0
    assert json.loads(cli("whoami", "-o", "json").stdout)["username"] == "nlp_member"
    assert json.loads(cli("--context", "admin", "whoami", "-o", "json").stdout)["username"] == "nlp_admin"
    assert cli("context", "delete", "admin").exit_code == 0
    assert cli("--context", "admin", "whoami").exit_code == 9
    assert cli("context", "use", "nowhere").exit_code == 4


def test_a_group_or_world_readable_config_file_is_refused_with_exit_9(portal: Portal, cli: Cli) -> None:
    cli.login(portal, "nlp_member")
    cli.config_file.chmod(0o644)
    result = cli("whoami")
    assert result.exit_code == 9
    assert "chmod 600" in result.stderr and "mode 0644" in result.stderr
    assert "token" not in result.stdout


def test_the_environment_overrides_the_file_and_needs_none(portal: Portal, cli: Cli) -> None:
    env_only = cli("whoami", "-o", "json", env={"GPUPORTAL_URL": portal.url, "GPUPORTAL_TOKEN": portal.tokens["auditor"]})
    assert env_only.exit_code == 0, env_only.stderr
    assert json.loads(env_only.stdout)["username"] == "auditor"
    assert not cli.config_file.exists()
    cli.login(portal, "nlp_member")
    token_only = cli("whoami", "-o", "json", env={"GPUPORTAL_TOKEN": portal.tokens["nlp_admin"]})
    assert json.loads(token_only.stdout)["username"] == "nlp_admin"
    dead_url = cli("whoami", env={"GPUPORTAL_URL": "http://127.0.0.1:9"})
    assert dead_url.exit_code == 1 and "cannot reach the portal at http://127.0.0.1:9" in dead_url.stderr


def test_without_a_context_or_token_commands_exit_3(cli: Cli) -> None:
    result = cli("allocations", "list")
    assert result.exit_code == 3
    assert "gpuportal login" in result.stderr


def test_allocations_list_in_table_json_and_yaml_with_filters(portal: Portal, cli: Cli) -> None:
    first, second = submit(portal), submit(portal, count=2)
    portal.api("nlp_admin", "POST", f"allocations/{second}/reject/", json={"comment": "no"})
    cli.login(portal, "nlp_member")
    table = cli("allocations", "list")
    assert table.exit_code == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:4] == ["ID", "STATE", "PROJECT", "FLAVOR"]
    assert {row.split()[0] for row in rows} == {str(first), str(second)}
    as_json = json.loads(cli("allocations", "list", "-o", "json", "--state", "pending").stdout)
    assert [a["id"] for a in as_json] == [first]
    as_yaml = yaml.safe_load(cli("-o", "yaml", "allocations", "list", "--project", "nlp-llm", "--state", "rejected",
                                 "--state", "pending").stdout)
    assert sorted(a["id"] for a in as_yaml) == [first, second]
    none = cli("allocations", "list", "--project", "vision-seg")
    assert none.exit_code == 4 and "no project named 'vision-seg'" in none.stderr


def test_lists_follow_every_page(portal: Portal, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("cli.client.PAGE_SIZE", 2)
    ids = {submit(portal) for _ in range(5)}
    cli.login(portal, "nlp_member")
    listed = json.loads(cli("allocations", "list", "-o", "json").stdout)
    assert {a["id"] for a in listed} == ids and len(listed) == 5


def test_show_release_and_renew(portal: Portal, cli: Cli) -> None:
    allocation_id = submit(portal)
    portal.api("nlp_admin", "POST", f"allocations/{allocation_id}/approve/", json={})
    cli.login(portal, "nlp_member")
    shown = cli("allocations", "show", str(allocation_id))
    assert shown.exit_code == 0, shown.stderr
    assert f"ID                {allocation_id}" in shown.stdout and "DECIDED BY        nlp_admin" in shown.stdout
    new_end = Allocation.objects.get(pk=allocation_id).ends_at + datetime.timedelta(days=1)
    renewed = cli("allocations", "renew", str(allocation_id), "--end", new_end.isoformat(), "--reason", "one more day",
                  "-o", "json")
    assert renewed.exit_code == 0, renewed.stderr
    assert "now ends at" in renewed.stderr
    assert Allocation.objects.get(pk=allocation_id).ends_at == new_end
    released = cli("allocations", "release", str(allocation_id), "--comment", "done", "-o", "json")
    assert released.exit_code == 0, released.stderr
    assert json.loads(released.stdout)["state"] == "released"
    assert Allocation.objects.get(pk=allocation_id).state == AllocationState.RELEASED
    again = cli("allocations", "release", str(allocation_id))
    assert again.exit_code == 5 and "HTTP 409" in again.stderr
    missing = cli("allocations", "show", "999999")
    assert missing.exit_code == 4 and "HTTP 404" in missing.stderr


def test_the_apis_field_messages_are_shown_with_exit_1(portal: Portal, cli: Cli) -> None:
    cli.login(portal, "nlp_member")
    result = cli("request", "create", "--project", "nlp-llm", "--flavor", "a100", "--count", "1", "--start", "+3d",
                 "--end", "+1d", "--reason", "backwards")
    assert result.exit_code == 1
    assert "HTTP 400" in result.stderr
    assert "  ends_at: The end must be after the start." in result.stderr.splitlines()
    assert any(line.startswith("  request id: ") for line in result.stderr.splitlines())


def test_approvals_as_the_department_admin_and_a_researcher_refused_with_exit_3(portal: Portal, cli: Cli) -> None:
    first, second = submit(portal), submit(portal)
    cli.login(portal, "nlp_member")
    refused = cli("approvals", "approve", str(first))
    assert refused.exit_code == 3 and "HTTP 403" in refused.stderr
    cli.login(portal, "nlp_admin")
    queue = json.loads(cli("approvals", "list", "-o", "json").stdout)
    assert sorted(a["id"] for a in queue) == sorted([first, second])
    approved = cli("approvals", "approve", str(first), "--comment", "ok", "-o", "json")  # as every command names it
    assert approved.exit_code == 0, approved.stderr
    assert "deprecated" not in approved.stderr
    assert json.loads(approved.stdout)["decision_comment"] == "ok"
    assert cli("approvals", "reject", str(second)).exit_code == 2  # --reason is required
    rejected = cli("approvals", "reject", str(second), "--reason", "too many", "-o", "json")
    assert json.loads(rejected.stdout)["state"] == "rejected"
    assert cli("approvals", "list").stderr.strip() == "No requests wait for a decision."


def test_quotas_show_for_a_department(portal: Portal, cli: Cli) -> None:
    cli.login(portal, "nlp_admin")
    quotas = json.loads(cli("quotas", "show", "--department", "nlp", "-o", "json").stdout)
    assert {(q["flavor"], q["limit"]) for q in quotas} >= {("a100", "8.0000")}
    assert {q["department"] for q in quotas} == {"nlp"}
    table = cli("quotas", "show", "--department", str(portal.world.nlp.pk))
    assert table.stdout.splitlines()[0].split()[:3] == ["ID", "DEPARTMENT", "FLAVOR"]
    at = (clock_now() + datetime.timedelta(days=30)).replace(microsecond=0)  # another instant
    later = json.loads(cli("quotas", "show", "--department", "nlp", "--at", at.isoformat(), "-o", "json").stdout)
    assert {(q["at"], q["effective_limit"], q["in_use"]) for q in later if q["flavor"] == "a100"} == {
        (at.isoformat().replace("+00:00", "Z"), "8.0000", "0.0000")}


def test_a_renewal_beyond_the_self_service_window_waits_and_the_admin_approves_it_as_a_change(
    portal: Portal, cli: Cli, settings: Any
) -> None:
    settings.GPUPORTAL_SELF_RENEW_DAYS = 1
    allocation_id = submit(portal)
    portal.api("nlp_admin", "POST", f"allocations/{allocation_id}/approve/", json={})
    new_end = Allocation.objects.get(pk=allocation_id).ends_at + datetime.timedelta(days=5)
    cli.login(portal, "nlp_member", "--context", "member")
    asked = cli("allocations", "renew", str(allocation_id), "--end", new_end.isoformat(), "--reason", "longer run")
    assert asked.exit_code == 0, asked.stderr
    assert "waits for a department admin's approval" in asked.stderr
    cli.login(portal, "nlp_admin", "--context", "admin")
    changes = json.loads(cli("approvals", "list", "--changes", "-o", "json").stdout)
    assert [(c["allocation"], c["kind"], c["state"]) for c in changes] == [(allocation_id, "renew", "pending")]
    decided = cli("approvals", "approve", str(changes[0]["id"]), "--change", "--note", "fine", "-o", "json")
    assert decided.exit_code == 0, decided.stderr  # --note: the former name, kept for scripts, with a warning
    assert "warning: --note is deprecated; use --comment" in decided.stderr
    assert json.loads(decided.stdout)["decision_comment"] == "fine"
    assert json.loads(decided.stdout)["state"] == "approved"
    assert Allocation.objects.get(pk=allocation_id).ends_at == new_end


def test_completion_offers_the_portals_project_names(portal: Portal, cli: Cli) -> None:
    words = "gpuportal allocations list --project "
    result = cli(env={"_GPUPORTAL_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": "4",
                      "GPUPORTAL_URL": portal.url, "GPUPORTAL_TOKEN": portal.tokens["nlp_member"]})
    assert result.exit_code == 0
    # the projects of nlp and its subtree, which the member may see; not vision's
    assert [line.split(",", 1)[1] for line in result.stdout.splitlines()] == ["nlp-llm", "speech-asr"]

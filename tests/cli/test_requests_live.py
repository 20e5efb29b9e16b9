"""Requesting GPUs from the command line against a live portal: --wait follows the request while a
department admin decides it through the API in another thread."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.cli.conftest import Cli, Portal

pytestmark = pytest.mark.django_db(transaction=True)


def decide_when_pending(portal: Portal, verb: str, body: dict[str, str]) -> threading.Thread:
    """In another thread, as nlp_admin: wait for a pending request, then approve or reject it."""

    def run() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pending = portal.api("nlp_admin", "GET", "allocations/", params={"state": "pending"}).json()["results"]
            if pending:
                response = portal.api("nlp_admin", "POST", f"allocations/{pending[0]['id']}/{verb}/", json=body)
                assert response.status_code == 200, response.text
                return
            time.sleep(0.3)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_wait_follows_a_request_through_approval_and_provisioning_to_active(portal: Portal, cli: Cli) -> None:
    cli.login(portal, "nlp_member")
    approver = decide_when_pending(portal, "approve", {"comment": "go ahead"})
    result = cli("request", "create", "--project", "nlp-llm", "--flavor", "a100", "--count", "2", "--end", "+2d",
                 "--reason", "fine-tuning", "--wait", "--timeout", "60", "-o", "json")
    approver.join(5)
    assert result.exit_code == 0, result.stderr
    allocation = json.loads(result.stdout)
    assert allocation["state"] == "active" and allocation["quantity"] == 2 and allocation["project"] == "nlp-llm"
    assert allocation["decided_by"] == "nlp_admin"
    progress = result.stderr
    assert "pending: waiting for a department admin's decision" in progress
    assert "active: the GPUs are yours" in progress
    assert progress.index("pending:") < progress.index("active:")


def test_wait_ends_with_exit_7_and_the_reason_when_the_request_is_rejected(portal: Portal, cli: Cli) -> None:
    cli.login(portal, "nlp_member")
    approver = decide_when_pending(portal, "reject", {"comment": "use the MIG flavor"})
    result = cli("request", "create", "--project", "nlp-llm", "--flavor", "a100", "--count", "1", "--end", "+1d",
                 "--reason", "eval", "--wait", "--timeout", "60")
    approver.join(5)
    assert result.exit_code == 7
    assert "rejected: use the MIG flavor (by nlp_admin)" in result.stderr
    assert "was not granted" in result.stderr


def test_wait_gives_up_after_the_timeout_with_exit_6_and_the_request_still_pending(portal: Portal, cli: Cli) -> None:
    cli.login(portal, "nlp_member")
    result = cli("request", "create", "--project", str(portal.world.llm.pk), "--flavor", "a100", "--count", "1",
                 "--end", "+1d", "--reason", "eval", "--wait", "--timeout", "1.5", "-o", "yaml")
    assert result.exit_code == 6
    assert "still pending after 1.5 s" in result.stderr
    assert "state: pending" in result.stdout


OVER_QUOTA = ("request", "create", "--project", "nlp-llm", "--flavor", "a100", "--count", "9", "--end", "+1d",
              "--reason", "more than the department's 8")


def test_a_request_approval_would_refuse_is_not_submitted_from_a_script_without_yes(portal: Portal, cli: Cli) -> None:
    """Where the portal's form asks to confirm (approval would be refused or reclaim grants), the
    client says so, and without a terminal to ask on submits nothing: exit 11."""
    cli.login(portal, "nlp_member")
    refused = cli(*OVER_QUOTA)
    assert refused.exit_code == 11, refused.stderr
    assert "warning: As things stand, approval would be refused" in refused.stderr
    assert "not submitted" in refused.stderr and "--yes" in refused.stderr
    assert portal.api("nlp_member", "GET", "allocations/", params={"mine": "true"}).json()["results"] == []


def test_yes_submits_it_anyway_and_no_at_the_terminal_does_not(portal: Portal, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    cli.login(portal, "nlp_member")
    submitted = cli(*OVER_QUOTA, "--yes", "-o", "json")
    assert submitted.exit_code == 0, submitted.stderr
    assert "approval would be refused" in submitted.stderr and json.loads(submitted.stdout)["state"] == "pending"
    monkeypatch.setattr("cli.commands.requests._interactive", lambda: True)  # as at a terminal
    declined = cli(*OVER_QUOTA, input="n\n")
    assert declined.exit_code == 11 and "Submit the request anyway?" in declined.stderr
    assert len(portal.api("nlp_member", "GET", "allocations/", params={"mine": "true"}).json()["results"]) == 1
    fits = cli("request", "create", "--project", "nlp-llm", "--flavor", "a100", "--count", "1", "--end", "+1d",
               "--reason", "fits")
    assert fits.exit_code == 0 and "warning" not in fits.stderr

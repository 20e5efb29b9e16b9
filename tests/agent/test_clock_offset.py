"""The agent's clock offset to the portal, measured from the Date header of the portal's answers."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path

import pytest

from agent.__main__ import EXIT_OK, run
from agent.portal_client import PortalClient, clock_offset
from agent.report import load_schema
from tests.agent.conftest import NODE_NAME
from tests.agent.nvml_replay import NvmlReplay
from tests.agent.portal_stub import PortalStub, ScriptedResponse
from tests.agent.schema_subset import validate

NOON = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)
DATE = format_datetime(NOON, usegmt=True)  # "Sat, 05 Dec 2026 12:00:00 GMT"


def test_the_offset_takes_the_middle_of_the_request_and_of_the_dates_second() -> None:
    sent, received = NOON.timestamp() + 10.2, NOON.timestamp() + 10.8  # this clock runs ten seconds ahead
    assert clock_offset(DATE, sent, received) == 10.0
    assert clock_offset(DATE, NOON.timestamp() - 30, NOON.timestamp() - 29) == -30.0  # 30 s behind


def test_no_unreadable_or_unbelievable_date_gives_no_offset() -> None:
    now = NOON.timestamp()
    assert clock_offset(None, now, now) is None
    assert clock_offset("", now, now) is None
    assert clock_offset("yesterday", now, now) is None
    assert clock_offset("Sat, 05 Dec 2026 12:00:00 -0000", now, now) is None  # no zone stated
    assert clock_offset(DATE, now + 86_401, now + 86_401) is None  # outside the schema's bounds


def _client(portal: PortalStub, token_file: Path, ahead: float) -> PortalClient:
    client = PortalClient(portal_url=portal.url, node_name=NODE_NAME, token_file=token_file, allow_plain_http=True)
    client.wall_clock = lambda: time.time() + ahead
    return client


def test_each_answer_of_the_portal_updates_the_offset_rejections_included(
    portal: PortalStub, token_file: Path
) -> None:
    client = _client(portal, token_file, ahead=42.0)
    assert client.clock_offset_seconds is None  # before the first answer

    client.post_report(b"{}")  # the stub's server stamps a real Date, to the second
    first = client.clock_offset_seconds
    portal.responses.append(ScriptedResponse(400, headers={}, body=b"bad"))
    client.post_report(b"{}")

    assert first is not None and 40.9 <= first <= 43.1
    assert client.clock_offset_seconds is not None and 40.9 <= client.clock_offset_seconds <= 43.1


def test_reports_to_the_portal_carry_the_offset_and_a_dry_run_does_not(
    replay_node: Callable[[str], tuple[NvmlReplay, Path]],
    portal: PortalStub,
    token_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, proc_root = replay_node("h100-80gb-no-mig")
    argv = ["--once", "--node-name", NODE_NAME, "--proc-root", str(proc_root), "--token-file", str(token_file)]
    status = run([*argv, "--portal-url", portal.url, "--allow-plain-http"], {})

    assert status == EXIT_OK
    [request] = portal.requests
    report = request.json()
    assert validate(report, load_schema()) == []
    assert report["clock_offset_seconds"] is None  # collected before the portal first answered
    assert run([*argv, "--dry-run"], {}) == EXIT_OK
    assert "clock_offset_seconds" not in json.loads(capsys.readouterr().out)

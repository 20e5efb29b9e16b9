"""``gpuportal what-if`` against a live portal: a limit raised over the last days, the table per
department, ``-o json``, and the API's refusals as exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import Cli, Portal
from tests.whatifs.history import over_nlp_limit
from tests.whatifs.test_what_ifs import BOOKED_AHEAD

pytestmark = pytest.mark.django_db(transaction=True)


def test_raising_nlps_limit_prints_the_difference_per_department(portal: Portal, cli: Cli) -> None:
    over_nlp_limit(portal.world)
    cli.login(portal, "nlp_admin")
    result = cli("what-if", "--raise-limit", "nlp=4", "--history", "7d", "--title", "raise nlp")
    assert result.exit_code == 0, result.stderr
    assert "done, 100 %" in result.stderr  # its progress, on standard error
    rows = [line.split() for line in result.stdout.splitlines()]
    p99 = next(row for row in rows if row[:2] == ["nlp", "wait_p99_min"])
    assert float(p99[2]) > float(p99[3]) and float(p99[4]) < 0  # current, proposed, difference
    assert any(row[:2] == ["vision", "wait_p99_min"] and float(row[4]) == 0 for row in rows)
    assert "  current: nlp: waited 2,820 min at p95; nlp's own limit bound 100 % of the GPU-hours waiting, " \
        "acme's limit 0 %" in result.stdout.splitlines()  # which level held it back, as the portal words it
    listed = json.loads(cli("what-if", "list", "-o", "json").stdout)
    assert [item["title"] for item in listed] == ["raise nlp"]
    shown = json.loads(cli("what-if", "show", str(listed[0]["id"]), "-o", "json").stdout)
    assert shown["state"] == "done" and shown["result"]["departments"][0]["department"] == "nlp"


def test_a_change_outside_the_admins_departments_is_refused_naming_the_field(portal: Portal, cli: Cli) -> None:
    cli.login(portal, "nlp_admin")
    refused = cli("what-if", "--raise-limit", "vision=4")
    assert refused.exit_code == 1 and "changes[0].department" in refused.stderr
    cli.login(portal, "nlp_member")
    assert cli("what-if", "--raise-limit", "nlp=4").exit_code == 3  # 403: members do not ask
    assert cli("what-if", "--raise-limit", "nlp").exit_code == 2  # no amount: a usage error


def test_a_workload_file_with_a_request_booked_ahead_says_so(portal: Portal, cli: Cli, tmp_path: Path) -> None:
    workload = tmp_path / "ahead.jsonl"
    workload.write_text("\n".join(json.dumps(line) for line in BOOKED_AHEAD) + "\n")
    cli.login(portal, "nlp_admin")
    result = cli("what-if", "--raise-limit", "nlp=4", "--workload", str(workload))
    assert result.exit_code == 0, result.stderr
    assert "what-if #" in result.stdout and ": 3 requests on " in result.stdout
    assert "1 of the requests asked for a later start than their submission: decided at their submission, over the " \
        "period they asked for (as the portal approves them ahead)" in result.stdout.splitlines()

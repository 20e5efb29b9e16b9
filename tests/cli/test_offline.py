"""The client's parts that need no portal: the reference docs, completion, exit codes of usage
errors, time parsing, the configuration's precedence, --wait's polling and the RFC 6962 tree."""

from __future__ import annotations

import datetime
import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from audit.integrity.keys import signing_key_generate
from audit.integrity.merkle import reference_root
from cli import __version__
from cli.auditcheck import _Tree
from cli.config import ConfigFile, Context, config_save, context_resolve
from cli.docs import reference_markdown
from cli.exits import CliError, Exit
from cli.times import parse_time
from cli.tree import root
from cli.waiting import Timer, allocation_wait

ROOT = Path(__file__).resolve().parents[2]


def test_docs_cli_md_is_generated_from_the_current_command_tree() -> None:
    assert (ROOT / "docs" / "cli.md").read_text() == reference_markdown(root), (
        "docs/cli.md is stale: run python -m cli docs > docs/cli.md"
    )


def test_the_reference_documents_every_command_and_every_exit_code() -> None:
    text = reference_markdown(root)
    for command in ("login", "whoami", "context list", "request create", "allocations list", "allocations renew",
                    "approvals approve", "approvals reject", "quotas show", "audit export", "audit verify", "completion"):
        assert f"### `gpuportal {command}`" in text
    for code in Exit:
        assert f"| {int(code)} |" in text


def test_python_dash_m_cli_runs_the_same_command_and_prints_the_version() -> None:
    done = subprocess.run([sys.executable, "-m", "cli", "--version"], capture_output=True, text=True, cwd=ROOT,
                          timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip() == f"gpuportal {__version__}"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_script_for_each_shell(shell: str) -> None:
    result = CliRunner().invoke(root, ["completion", shell], prog_name="gpuportal")
    assert result.exit_code == 0
    assert "_GPUPORTAL_COMPLETE" in result.stdout


def test_the_completion_script_completes_commands_and_choices() -> None:
    def complete(words: str) -> list[str]:
        env = {"_GPUPORTAL_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
        if words.endswith(" "):
            env["COMP_CWORD"] = str(len(words.split()))
        result = CliRunner().invoke(root, [], env=env, prog_name="gpuportal")
        return [line.split(",", 1)[1] for line in result.stdout.splitlines()]

    assert "allocations" in complete("gpuportal allo")
    assert complete("gpuportal allocations list --state rej") == ["rejected"]
    assert {"json", "yaml", "table"} == set(complete("gpuportal -o "))


def test_usage_errors_exit_2() -> None:
    runner = CliRunner()
    assert runner.invoke(root, ["allocations", "show", "not-a-number"]).exit_code == 2
    assert runner.invoke(root, ["request", "create", "--project", "p"]).exit_code == 2
    assert runner.invoke(root, ["-o", "xml", "whoami"]).exit_code == 2
    assert runner.invoke(root, ["login", "--url", "http://x", "--token", "a", "--token-stdin"]).exit_code == 2


def test_times_are_iso_now_or_offsets_from_now() -> None:
    now = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
    assert parse_time("now", now=now) == now
    assert parse_time("+90m", now=now) == now + datetime.timedelta(minutes=90)
    assert parse_time("+7d", now=now) == now + datetime.timedelta(days=7)
    assert parse_time("+2w", now=now) == now + datetime.timedelta(weeks=2)
    assert parse_time("2026-12-24T09:00+01:00").isoformat() == "2026-12-24T09:00:00+01:00"
    assert parse_time("2026-12-24").tzinfo is not None  # local time, made explicit
    with pytest.raises(ValueError, match="not a time"):
        parse_time("tomorrow")


def _save(tmp_path: Path, current: str | None, **contexts: tuple[str, str]) -> dict[str, str]:
    path = tmp_path / "gpuportal" / "config.yaml"
    config_save(ConfigFile(path=path, current=current,
                           contexts={n: Context(name=n, url=u, token=t) for n, (u, t) in contexts.items()}))
    return {"XDG_CONFIG_HOME": str(tmp_path)}


def test_precedence_flag_then_environment_then_file(tmp_path: Path) -> None:
    env = _save(tmp_path, "a", a=("http://a", "ta"), b=("http://b", "tb"))
    assert context_resolve(name=None, environ=env) == Context("a", "http://a", "ta")
    assert context_resolve(name=None, environ={**env, "GPUPORTAL_CONTEXT": "b"}).url == "http://b"
    overridden = context_resolve(name=None, environ={**env, "GPUPORTAL_TOKEN": "te"})
    assert (overridden.url, overridden.token) == ("http://a", "te")
    named = context_resolve(name="b", environ={**env, "GPUPORTAL_URL": "http://e", "GPUPORTAL_TOKEN": "te"})
    assert (named.url, named.token) == ("http://b", "tb")


def test_with_url_and_token_in_the_environment_an_unsafe_file_is_not_even_read(tmp_path: Path) -> None:
    env = _save(tmp_path, "a", a=("http://a", "ta"))
    (tmp_path / "gpuportal" / "config.yaml").chmod(0o640)
    assert context_resolve(name=None, environ={**env, "GPUPORTAL_URL": "http://e", "GPUPORTAL_TOKEN": "te"}).url == "http://e"
    with pytest.raises(CliError) as refused:
        context_resolve(name=None, environ=env)
    assert refused.value.code == Exit.CONFIG


def test_saving_replaces_the_file_atomically_with_mode_0600(tmp_path: Path) -> None:
    env = _save(tmp_path, "a", a=("http://a", "ta"))
    path = tmp_path / "gpuportal" / "config.yaml"
    path.chmod(0o644)
    _save(tmp_path, "a", a=("http://a", "ta2"))
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert context_resolve(name=None, environ=env).token == "ta2"
    assert sorted(os.listdir(path.parent)) == ["config.yaml"]


class FakeApi:
    def __init__(self, states: list[str]) -> None:
        self.states = states

    def get(self, path: str, params: Any = None) -> dict[str, Any]:
        return {"id": 7, "state": self.states.pop(0) if len(self.states) > 1 else self.states[0]}


def test_wait_backs_off_and_reports_each_state_once() -> None:
    sleeps: list[float] = []
    seen: list[str] = []
    api = FakeApi(["pending", "pending", "pending", "approved", "provisioning", "active"])
    outcome = allocation_wait(api, {"id": 7, "state": "pending"}, timeout=600,  # type: ignore[arg-type]
                              report=lambda state, _: seen.append(state), timer=Timer(sleeps.append, lambda: 0.0))
    assert outcome.code == Exit.OK and seen == ["pending", "approved", "provisioning", "active"]
    assert sleeps[:3] == [1.0, 1.5, 2.25]  # growing while nothing changes
    assert sleeps[4] == 1.0  # back to 1 s after a change


class FlakyApi:
    """Unreachable twice, then a 404 (the request was deleted under us)."""

    def __init__(self) -> None:
        self.calls = 0

    def get(self, path: str, params: Any = None) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= 2:
            raise CliError("cannot reach the portal", Exit.ERROR, transient=True)
        if self.calls == 3:
            return {"id": 7, "state": "approved"}
        raise CliError("Not found.", Exit.NOT_FOUND)


def test_wait_asks_again_when_the_portal_is_unreachable_and_stops_on_a_refusal() -> None:
    warnings: list[str] = []
    seen: list[str] = []
    api = FlakyApi()
    with pytest.raises(CliError) as refused:
        allocation_wait(api, {"id": 7, "state": "pending"}, timeout=600,  # type: ignore[arg-type]
                        report=lambda state, _: seen.append(state), warn=warnings.append,
                        timer=Timer(lambda _: None, lambda: 0.0))
    assert refused.value.code == Exit.NOT_FOUND
    assert warnings == ["cannot reach the portal; asking again"] * 2
    assert seen == ["pending", "approved"] and api.calls == 4


def test_wait_times_out_without_sleeping_past_the_deadline() -> None:
    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    outcome = allocation_wait(FakeApi(["pending"]), {"id": 7, "state": "pending"}, timeout=5,  # type: ignore[arg-type]
                              report=lambda *_: None, timer=Timer(sleep, lambda: now[0]))
    assert outcome.code == Exit.TIMEOUT and sum(sleeps) == pytest.approx(5)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13, 64, 100])
def test_the_tree_folds_leaves_and_aligned_subtrees_to_the_rfc_6962_root(size: int) -> None:
    leaves = [hashlib.sha256(b"\x00" + str(i).encode()).digest() for i in range(size)]
    one_by_one = _Tree()
    for leaf in leaves:
        one_by_one.append(0, leaf)
    assert one_by_one.root() == reference_root(leaves)
    if size >= 8:
        with_nodes = _Tree()
        with_nodes.append(3, reference_root(leaves[:8]))
        for leaf in leaves[8:]:
            with_nodes.append(0, leaf)
        assert with_nodes.root() == reference_root(leaves)


def test_login_over_plain_http_to_another_host_warns_that_secrets_cross_unencrypted(tmp_path: Path) -> None:
    result = CliRunner().invoke(root, ["login", "--url", "http://gpus.example.invalid", "--token", "t"],
                                env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert "plain HTTP: the password and the token cross the network unencrypted" in result.stderr
    assert result.exit_code == 1 and "cannot reach the portal" in result.stderr
    assert not (tmp_path / "gpuportal").exists()


def test_the_console_script_gpuportal_is_the_command_tree() -> None:
    import importlib
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, attribute = scripts["gpuportal"].partition(":")
    entry = getattr(importlib.import_module(module), attribute)
    with pytest.raises(SystemExit) as done:
        entry(["--version"])
    assert done.value.code == 0


@pytest.mark.parametrize(
    "content",
    [
        b"seq,occurred_at\n1,2026-12-01\n",  # a CSV export
        b'{"@":"bundle","version":1,"checkpoint":"x"}\n',  # a bundle whose checkpoint is no signed note
        b'not json at all\n',
    ],
)
def test_a_file_that_is_no_export_fails_verification_as_malformed(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "export.jsonl"
    path.write_bytes(content)
    key = signing_key_generate("gpuportal/audit").verifier.vkey()
    result = CliRunner().invoke(root, ["audit", "verify", str(path), "--key", key])
    assert result.exit_code == 8
    assert "[malformed]" in result.stderr

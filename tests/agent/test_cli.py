"""The agent as a program: exit codes, the no-driver message, --once, --dry-run, settings."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.__main__ import EXIT_CONFIG, EXIT_NOT_DELIVERED, EXIT_NVML_UNAVAILABLE, EXIT_OK, run
from agent.config import parse_config
from agent.report import load_schema
from tests.agent.conftest import NODE_NAME, TOKEN
from tests.agent.nvml_replay import NvmlReplay
from tests.agent.portal_stub import PortalStub, ScriptedResponse
from tests.agent.schema_subset import validate

REPO_ROOT = Path(__file__).resolve().parents[2]
ReplayNode = Callable[[str], tuple[NvmlReplay, Path]]
RECORDINGS = ["a100-80gb-mig", "h100-80gb-no-mig", "h200-8gpu-node", "faulty-gpus-node"]


def _nvml_library_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_nvml_library_present(), reason="this machine has an NVIDIA driver")
def test_without_a_driver_it_exits_with_one_clear_line() -> None:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("GPUPORTAL_AGENT_")}
    finished = subprocess.run(
        [sys.executable, "-m", "agent", "--once", "--dry-run", "--node-name", NODE_NAME],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == EXIT_NVML_UNAVAILABLE == 3
    assert finished.stdout == ""
    lines = finished.stderr.splitlines()
    assert len(lines) == 1, finished.stderr
    assert lines[0].startswith("gpuportal-agent: NVML library not found")
    assert "NVMLError_LibraryNotFound" in lines[0]


def test_a_driver_that_is_not_loaded_is_reported_the_same_way(
    replay_node: ReplayNode, capsys: pytest.CaptureFixture[str]
) -> None:
    replay, _ = replay_node("h100-80gb-no-mig")
    replay.recording["nvmlInit"] = {"nvml_error": "NVMLError_DriverNotLoaded"}
    assert run(["--once", "--dry-run", "--node-name", NODE_NAME], {}) == EXIT_NVML_UNAVAILABLE
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert "NVMLError_DriverNotLoaded" in line


@pytest.mark.parametrize("recording", RECORDINGS)
def test_once_dry_run_prints_a_report_that_matches_the_schema(
    replay_node: ReplayNode, capsys: pytest.CaptureFixture[str], recording: str
) -> None:
    replay, proc_root = replay_node(recording)
    status = run(["--once", "--dry-run", "--node-name", NODE_NAME, "--proc-root", str(proc_root)], {})
    assert status == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert validate(report, load_schema()) == []
    assert report["node_name"] == NODE_NAME and report["sequence"] == 0
    assert len(report["gpus"]) == len(replay.recording["devices"])
    assert replay.initialised == 0


def test_once_sends_one_report_to_the_portal(replay_node: ReplayNode, portal: PortalStub, token_file: Path) -> None:
    _, proc_root = replay_node("a100-80gb-mig")
    environ = {
        "GPUPORTAL_AGENT_PORTAL_URL": portal.url,
        "GPUPORTAL_AGENT_NODE_NAME": NODE_NAME,
        "GPUPORTAL_AGENT_TOKEN_FILE": str(token_file),
        "GPUPORTAL_AGENT_PROC_ROOT": str(proc_root),
        "GPUPORTAL_AGENT_ALLOW_PLAIN_HTTP": "true",
        "GPUPORTAL_AGENT_INTERVAL": "15",
    }
    assert run(["--once"], environ) == EXIT_OK
    [request] = portal.requests
    assert request.path == f"/api/v1/nodes/{NODE_NAME}/report"
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    report = request.json()
    assert validate(report, load_schema()) == []
    assert report["interval_seconds"] == 15
    assert [m["profile"] for m in report["gpus"][0]["mig_instances"]] == ["3g.40gb", "2g.20gb", "2g.20gb"]


def test_once_exits_non_zero_when_the_report_is_not_delivered(
    replay_node: ReplayNode, portal: PortalStub, token_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replay_node("h100-80gb-no-mig")
    portal.responses = [ScriptedResponse(503)]
    argv = ["--once", "--portal-url", portal.url, "--node-name", NODE_NAME, "--token-file", str(token_file)]
    assert run([*argv, "--allow-plain-http"], {}) == EXIT_NOT_DELIVERED
    assert "report not delivered: HTTP 503" in capsys.readouterr().err


def test_a_missing_token_file_stops_it_before_touching_nvml(
    replay_node: ReplayNode, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replay, _ = replay_node("h100-80gb-no-mig")
    argv = ["--once", "--portal-url", "https://portal.example", "--node-name", NODE_NAME]
    assert run([*argv, "--token-file", str(tmp_path / "absent")], {}) == EXIT_CONFIG
    [line] = capsys.readouterr().err.splitlines()
    assert "node token file" in line
    assert replay.calls == []


def test_a_plain_http_portal_is_a_configuration_error(
    replay_node: ReplayNode, token_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replay_node("h100-80gb-no-mig")
    argv = ["--portal-url", "http://portal.example", "--node-name", NODE_NAME, "--token-file", str(token_file)]
    assert run(argv, {}) == EXIT_CONFIG
    assert "must be https://" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        ([], {}, "--node-name"),
        (["--node-name", NODE_NAME], {}, "--portal-url"),
        (["--dry-run", "--node-name", "GPU_Node_1"], {}, "not a Kubernetes node name"),
        (["--dry-run", "--interval", "0"], {}, "--interval"),
        (["--dry-run"], {"GPUPORTAL_AGENT_INTERVAL": "often"}, "GPUPORTAL_AGENT_INTERVAL='often'"),
        (["--dry-run"], {"GPUPORTAL_AGENT_ALLOW_PLAIN_HTTP": "maybe"}, "must be true or false"),
        (["--dry-run", "--backoff-initial", "10", "--backoff-max", "5"], {}, "--backoff-initial"),
        (["--dry-run"], {"GPUPORTAL_AGENT_LOG_LEVEL": "chatty"}, "LOG_LEVEL"),
    ],
)
def test_bad_settings_are_usage_errors(
    argv: list[str], environ: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_config(argv, environ)
    assert exited.value.code == EXIT_CONFIG
    assert message in capsys.readouterr().err


def test_flags_override_the_environment() -> None:
    environ = {
        "GPUPORTAL_AGENT_PORTAL_URL": "https://portal.example",
        "GPUPORTAL_AGENT_NODE_NAME": "node-from-env",
        "GPUPORTAL_AGENT_INTERVAL": "60",
        "GPUPORTAL_AGENT_CA_BUNDLE": "/etc/gpuportal/ca.pem",
        "GPUPORTAL_AGENT_ALLOW_PLAIN_HTTP": "true",
    }
    config = parse_config(["--interval", "5", "--no-allow-plain-http"], environ)
    assert (config.interval_seconds, config.node_name, config.allow_plain_http) == (5, "node-from-env", False)
    assert config.ca_bundle == Path("/etc/gpuportal/ca.pem")
    assert config.portal_url == "https://portal.example"
    assert config.proc_root == Path("/proc")
    assert not config.once and not config.dry_run


def test_it_reports_every_interval_until_sigterm(replay_node: ReplayNode, capsys: pytest.CaptureFixture[str]) -> None:
    _, proc_root = replay_node("h100-80gb-no-mig")
    previous_handler = signal.getsignal(signal.SIGTERM)
    terminate = threading.Timer(1.3, os.kill, args=(os.getpid(), signal.SIGTERM))
    terminate.start()
    try:
        status = run(["--dry-run", "--interval", "1", "--node-name", NODE_NAME, "--proc-root", str(proc_root)], {})
    finally:
        terminate.cancel()
    assert status == EXIT_OK
    reports = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["sequence"] for r in reports] == [0, 1]  # at t=0 and t=1, stopped at t=1.3
    assert all(validate(r, load_schema()) == [] for r in reports)
    assert signal.getsignal(signal.SIGTERM) is previous_handler


def test_a_missing_ca_bundle_is_a_configuration_error(
    replay_node: ReplayNode, token_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replay_node("h100-80gb-no-mig")
    argv = ["--portal-url", "https://portal.example", "--node-name", NODE_NAME, "--token-file", str(token_file)]
    assert run([*argv, "--ca-bundle", str(tmp_path / "absent.pem")], {}) == EXIT_CONFIG
    assert len(capsys.readouterr().err.splitlines()) == 1

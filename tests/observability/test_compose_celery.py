"""The worker's and beat's health checks of docker-compose.yml, run as written against a real Redis,
a real worker and a real beat: both pass, a check of a node that is not there fails, and both
processes log JSON through the portal's configuration (not Celery's own)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.clusters.test_worker_delivery import Redis, redis

__all__ = ["redis"]  # the fixture: a redis-server of this test's own

ROOT = Path(__file__).resolve().parents[2]
SERVICES = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]


def check_command(service: str) -> str:
    kind, command = SERVICES[service]["healthcheck"]["test"]
    assert kind == "CMD-SHELL"
    return str(command).replace("$$", "$")  # Compose's escape for a literal $


@pytest.fixture
def celery_processes(redis: Redis, tmp_path: Path) -> Iterator[tuple[dict[str, str], dict[str, Path]]]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("GPUPORTAL_", "CELERY_"))}
    environment.update({
        "DJANGO_SETTINGS_MODULE": "gpuportal.settings", "GPUPORTAL_DEBUG": "true", "CELERY_BROKER_URL": redis.url,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}", "GPUPORTAL_VAR_DIR": str(tmp_path),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOSTNAME": socket.gethostname(),  # what a container's shell has; Celery names its nodes after it
    })
    commands = {
        "worker": ["celery", "-A", "gpuportal", "worker", "--pool", "solo"],
        "beat": ["celery", "-A", "gpuportal", "beat", "--schedule", str(tmp_path / "celerybeat-schedule")],
    }
    logs = {name: tmp_path / f"{name}.log" for name in commands}
    processes = []
    for name, command in commands.items():
        with logs[name].open("w") as output:
            processes.append(subprocess.Popen(command, cwd=ROOT, env=environment, stdout=subprocess.DEVNULL, stderr=output))
    try:
        yield environment, logs
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def run_check(command: str, environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", command], cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=60, check=False)


def test_the_worker_and_beat_checks_pass_against_live_processes_and_fail_for_a_missing_node(
    celery_processes: tuple[dict[str, str], dict[str, Path]],
) -> None:
    environment, logs = celery_processes
    deadline = time.monotonic() + 120
    passed: dict[str, bool] = {"worker": False, "beat": False}
    while not all(passed.values()) and time.monotonic() < deadline:
        for service in passed:
            if not passed[service]:
                passed[service] = run_check(check_command(service), environment).returncode == 0
        if not all(passed.values()):
            time.sleep(2)
    assert passed == {"worker": True, "beat": True}, {name: path.read_text()[-2000:] for name, path in logs.items()}
    elsewhere = run_check(check_command("worker"), {**environment, "HOSTNAME": "no-such-node"})
    assert elsewhere.returncode != 0
    for name, marker in (("worker", "celery.apps.worker"), ("beat", "celery.beat")):
        records = [json.loads(line) for line in logs[name].read_text().splitlines() if line.startswith("{")]
        assert any(record["logger"] == marker for record in records), name
        assert all({"timestamp", "level", "logger", "message", "request_id"} <= set(record) for record in records)

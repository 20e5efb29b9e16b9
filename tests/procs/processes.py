"""The real processes of ``tests/procs/test_many_processes.py``: gunicorn web processes (one worker
each, two threads) and Celery workers (a prefork pool each) on the test database as the test run's
own role (the application role under ``make test``), tasks through Redis on a queue of the run's
own, pushes into one manifests folder. Their logs go to a folder the test names."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
START_LIMIT_SECONDS = 90


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def database_url() -> str:
    """The test database, as the role this test run connects with."""
    settings = connection.settings_dict
    return (f"postgres://{settings['USER']}:{settings['PASSWORD']}@{settings['HOST'] or '127.0.0.1'}:"
            f"{settings['PORT'] or 5432}/{settings['NAME']}")


@dataclass
class Fleet:
    """What was started, to stop it and to read its logs."""

    logs: Path
    env: dict[str, str]
    web: list[str] = field(default_factory=list)  # base URLs
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        with (self.logs / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        self.processes.append(process)
        return process

    def web_start(self, name: str) -> None:
        port = free_port()
        self.start(name, [str(BIN / "gunicorn"), "gpuportal.wsgi:application", "--bind", f"127.0.0.1:{port}",
                          "--workers", "1", "--worker-class", "gthread", "--threads", "2", "--timeout", "120"])
        self.web.append(f"http://127.0.0.1:{port}")

    def worker_start(self, name: str, *, queue: str, pool: int) -> None:
        self.start(name, [str(BIN / "celery"), "-A", "gpuportal", "worker", "--pool=prefork", f"--concurrency={pool}",
                          "-Q", queue, "--hostname", f"{name}@%h", "--loglevel=WARNING", "--without-gossip",
                          "--without-mingle", "--without-heartbeat"])

    def wait_web(self) -> None:
        """Until every web process answers ``/livez`` (or one of them died)."""
        deadline = time.monotonic() + START_LIMIT_SECONDS
        for base in self.web:
            while True:
                try:
                    with urllib.request.urlopen(f"{base}/livez", timeout=10):  # noqa: S310 - loopback
                        break
                except OSError:
                    dead = [process.args for process in self.processes if process.poll() is not None]
                    if dead or time.monotonic() > deadline:
                        raise RuntimeError(f"a process did not start: {dead}\n{self.log_tails()}") from None
                    time.sleep(0.3)

    def log_tails(self, lines: int = 30) -> str:
        out = []
        for log in sorted(self.logs.glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"== {log.name}\n" + "\n".join(tail))
        return "\n".join(out)

    def errors(self) -> str:
        """Every line of the web processes' logs at level ERROR (a server error's traceback is in
        its record), named by log: put first in a failure's message, before the tails."""
        out = []
        for log in sorted(self.logs.glob("web-*.log")):
            lines = [line for line in log.read_text(errors="replace").splitlines() if '"level": "ERROR"' in line]
            out += [f"== {log.name}: {line}" for line in lines]
        return "\n".join(out)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


@contextmanager
def fleet_running(*, logs: Path, broker_url: str, queue: str, manifests: Path, web: int, workers: int,
                  pool: int) -> Iterator[Fleet]:
    """``web`` gunicorn processes and ``workers`` Celery workers of ``pool`` processes each."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.procs.settings",
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": broker_url,
        "GPUPORTAL_TEST_QUEUE": queue,
        "GPUPORTAL_MANIFESTS_DIR": str(manifests),
        "GPUPORTAL_LOG_LEVEL": "WARNING",
        "GPUPORTAL_DEBUG": "false",
        "GPUPORTAL_VAR_DIR": str(logs / "var"),
    }
    fleet = Fleet(logs=logs, env=env)
    try:
        for number in range(web):
            fleet.web_start(f"web-{number}")
        for number in range(workers):
            fleet.worker_start(f"worker-{number}", queue=queue, pool=pool)
        fleet.wait_web()
        yield fleet
    finally:
        fleet.stop()

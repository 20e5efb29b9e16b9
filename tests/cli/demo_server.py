"""A portal as ``make run`` starts it, for the client's tests: the production settings in debug
mode on a SQLite file of its own, migrated and loaded with ``seed_demo`` (users alice, bob, carol
… with the password ``demo``), served by ``manage.py runserver`` on a free loopback port.

Its database is its own, so what the tests do there (audit checkpoints signed with the development
key above all: the audit log is append-only and outlives any flush) never reaches the suite's
test database.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "demo"
# What must not leak from the test run into the demo portal: the suite's databases and broker.
DROPPED = ("DATABASE_URL", "GPUPORTAL_APP_DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")


@dataclass
class DemoServer:
    url: str
    env: dict[str, str]
    tokens: dict[str, str] = field(default_factory=dict)
    key: str | None = None

    def manage(self, *args: str) -> str:
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True,
                              text=True, timeout=300, check=True)
        return done.stdout

    def token(self, username: str) -> str:
        if username not in self.tokens:  # each sign-in hashes the password: once per user
            response = requests.post(f"{self.url}/api/v1/auth/token/",
                                     json={"username": username, "password": PASSWORD}, timeout=30)
            response.raise_for_status()
            self.tokens[username] = str(response.json()["token"])
        return self.tokens[username]

    def verifier_key(self) -> str:
        """The verifier key of the development signing key (``manage.py audit_keys``'s first line)."""
        if self.key is None:
            self.key = self.manage("audit_keys").splitlines()[0]
        return self.key


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def demo_server(var_dir: Path) -> Iterator[DemoServer]:
    env = {k: v for k, v in os.environ.items() if k not in DROPPED and not k.startswith("GPUPORTAL_")}
    env.update({"GPUPORTAL_DEBUG": "true", "GPUPORTAL_VAR_DIR": str(var_dir), "GPUPORTAL_LOG_FORMAT": "console",
                "DJANGO_SETTINGS_MODULE": "gpuportal.settings"})
    port = _free_port()
    server = DemoServer(url=f"http://127.0.0.1:{port}", env=env)
    server.manage("migrate", "--noinput")
    server.manage("seed_demo")
    log = (var_dir / "server.log").open("w")
    process = subprocess.Popen([sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
                               cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{server.url}/livez", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the demo portal did not start: {(var_dir / 'server.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()

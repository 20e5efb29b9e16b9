"""The portal under load for benchmarks: a throw-away PostgreSQL database, migrated and seeded,
served by gunicorn on a free loopback port, and everything removed afterwards.

Without ``DATABASE_URL`` it starts PostgreSQL and Redis with ``scripts/services.sh`` and stops them
after the run.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def services_up() -> dict[str, str]:
    output = subprocess.run([str(ROOT / "scripts/services.sh"), "up"], check=True, capture_output=True, text=True).stdout
    env = {}
    for line in output.splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            env[key] = value
    return env


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def create_database(url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')


def drop_database(url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass(frozen=True)
class ServedPortal:
    port: int
    env: dict[str, str]
    seed_output: str  # what the seed script printed
    server: subprocess.Popen[bytes]


def port_wait(port: int) -> None:
    """Wait up to about 20 s for a server to listen on the loopback ``port``."""
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)


@contextmanager
def portal_served(
    *, prefix: str, seed: str, workers: int, settings_module: str = "gpuportal.settings", use_broker: bool = True,
    gunicorn_args: tuple[str, ...] = (), root: Path = ROOT,
) -> Iterator[ServedPortal]:
    """Migrate a fresh database, run ``seed`` in ``manage.py shell``, serve it with gunicorn (with
    ``gunicorn_args`` added to its command line); the portal's code is ``root``'s (another
    checkout's for a benchmark's baseline)."""
    started_services = "DATABASE_URL" not in os.environ
    env = dict(os.environ)
    if started_services:
        env.update(services_up())
    if not use_broker:
        env.pop("CELERY_BROKER_URL", None)
    admin_url = env["DATABASE_URL"]
    database = f"{prefix}_{uuid.uuid4().hex[:8]}"
    create_database(admin_url, database)
    manifests = tempfile.mkdtemp(prefix="gpuportal-bench-")
    env.update({
        "DATABASE_URL": with_database(admin_url, database),
        "GPUPORTAL_SECRET_KEY": "bench-only-secret-key-0123456789-0123456789",
        "GPUPORTAL_DEBUG": "false",
        "GPUPORTAL_MANIFESTS_DIR": manifests,
        "GPUPORTAL_LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": settings_module,
    })  # fmt: skip
    server = None
    try:
        subprocess.run([PYTHON, "manage.py", "migrate", "--noinput", "-v0"], cwd=root, env=env, check=True)
        seeded = subprocess.run(
            [PYTHON, "manage.py", "shell", "-c", seed], cwd=root, env=env, check=True, capture_output=True, text=True
        ).stdout
        port = free_port()
        server = subprocess.Popen(
            [PYTHON, "-m", "gunicorn", "gpuportal.wsgi:application", "--bind", f"127.0.0.1:{port}",
             "--workers", str(workers), "--log-level", "warning", *gunicorn_args],
            cwd=root, env=env,
        )  # fmt: skip
        port_wait(port)
        yield ServedPortal(port=port, env=env, seed_output=seeded, server=server)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        drop_database(admin_url, database)
        shutil.rmtree(manifests, ignore_errors=True)
        if started_services:
            subprocess.run([str(ROOT / "scripts/services.sh"), "down"], check=False)


@contextmanager
def celery_workers(env: dict[str, str], count: int, log_dir: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` Celery worker processes (solo pool: one task at a time each, like one worker
    container) on the portal's broker and database; logs in ``log_dir``; stopped afterwards."""
    if not env.get("CELERY_BROKER_URL"):
        raise RuntimeError("Celery workers need CELERY_BROKER_URL (a Redis URL)")
    celery = str(Path(PYTHON).parent / "celery")
    workers = []
    try:
        for index in range(count):
            log = (log_dir / f"worker-{index}.log").open("wb")
            workers.append(subprocess.Popen(
                [celery, "-A", "gpuportal", "worker", "--pool=solo", "--loglevel=WARNING", f"--hostname=bench{index}@%h",
                 "--without-gossip", "--without-mingle", "--without-heartbeat"],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            ))  # fmt: skip
        yield workers
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(timeout=10)

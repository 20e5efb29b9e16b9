"""A real Celery worker against a real Redis: nothing is lost when the broker is down at commit
time, or when the worker is killed in the middle of a push."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from allocations.models import AllocationState
from clusters.models import ClusterPush, PushState
from clusters.outbox import pushes_dispatch
from tests.clusters.conftest import use_kubeconfig
from tests.clusters.test_kube_delivery import grant
from tests.conftest import World, requires_postgres

pytestmark = [pytest.mark.django_db(transaction=True), requires_postgres()]
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Redis:
    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None


@pytest.fixture
def redis() -> Iterator[Redis]:
    if shutil.which("redis-server") is None:
        if os.environ.get("GPUPORTAL_REQUIRE_POSTGRES") == "1":
            pytest.fail("redis-server is missing (scripts/services.sh installs it)")
        pytest.skip("redis-server is missing")
    server = Redis()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def broker(redis: Redis) -> Iterator[Redis]:
    """This process publishes to the test Redis instead of running tasks in-process."""
    from gpuportal.celery import app

    saved = {"task_always_eager": app.conf.task_always_eager, "broker_url": app.conf.broker_url}
    app.conf.update(task_always_eager=False, broker_url=redis.url)
    _reset_connections(app)
    yield redis
    app.conf.update(saved)
    _reset_connections(app)


def _reset_connections(app: Any) -> None:
    """Drop the connection and producer pools (the app's and kombu's registry of them), so the
    next publish opens fresh ones to the current broker."""
    from kombu import pools

    if app._pool is not None:
        app._pool.force_close_all()
        app._pool = None
    app.amqp._producer_pool = None
    pools.reset()


def _database_url() -> str:
    settings = connection.settings_dict
    return (f"postgres://{settings['USER']}:{settings['PASSWORD']}@{settings['HOST'] or '127.0.0.1'}:"
            f"{settings['PORT'] or 5432}/{settings['NAME']}")


@pytest.fixture
def start_worker(broker: Redis, tmp_path: Path) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    workers: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.clusters.worker_settings",
            "DATABASE_URL": _database_url(),
            "CELERY_BROKER_URL": broker.url,
            "GPUPORTAL_PUSH_LEASE_SECONDS": "2",
            "GPUPORTAL_PUSH_BACKOFF_BASE_SECONDS": "0.5",
            "GPUPORTAL_PUSH_BACKOFF_MAX_SECONDS": "2",
            "GPUPORTAL_KUBE_REQUEST_TIMEOUT_SECONDS": "120",
        }
        log = (tmp_path / f"worker-{len(workers)}.log").open("wb")
        worker = subprocess.Popen(
            [str(Path(sys.executable).parent / "celery"), "-A", "gpuportal", "worker", "--pool=solo", "--loglevel=INFO",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=10)


def wait_until(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def test_a_push_committed_while_redis_is_down_is_delivered_once_it_is_back(
    kube_world: World, redis: Redis, start_worker: Callable[[], subprocess.Popen[bytes]], core: Any
) -> None:
    redis.stop()
    allocation = grant(kube_world, quantity=2)  # commits; handing the push to the broker fails quietly
    assert allocation.state == AllocationState.APPROVED
    assert ClusterPush.objects.filter(allocation=allocation, state=PushState.PENDING).exists()

    redis.start()
    start_worker()
    assert pushes_dispatch() >= 1  # what beat does every few seconds

    wait_until(lambda: _state(allocation.pk) == AllocationState.ACTIVE, timeout=60, what="the allocation to become active")
    quota = core.read_namespaced_resource_quota("gpuportal-gpu-quota", kube_world.llm.slug)
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "2"


def test_a_worker_killed_in_the_middle_of_a_push_is_replaced_and_the_push_converges(
    kube_world: World, kube_cluster: Any, start_worker: Callable[[], subprocess.Popen[bytes]], core: Any
) -> None:
    real = kube_cluster.kubeconfig.read_text()
    with socket.create_server(("127.0.0.1", 0)) as black_hole:  # accepts the TCP connection, never answers
        use_kubeconfig(kube_world.cluster, real.replace(kube_cluster.server, f"https://127.0.0.1:{black_hole.getsockname()[1]}"))
        worker = start_worker()
        allocation = grant(kube_world, quantity=1)
        push = ClusterPush.objects.get(allocation=allocation)
        wait_until(lambda: _claimed(push.pk), timeout=60, what="the worker to claim the push")
        time.sleep(1)  # it is now waiting on the API server
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
    assert _state(allocation.pk) == AllocationState.PROVISIONING

    use_kubeconfig(kube_world.cluster, real)
    start_worker()
    time.sleep(2.5)  # the dead worker's lease runs out
    assert pushes_dispatch() >= 1

    wait_until(lambda: _state(allocation.pk) == AllocationState.ACTIVE, timeout=60, what="the allocation to become active")
    push.refresh_from_db()
    assert push.state == PushState.DONE and push.attempts == 2
    assert core.read_namespaced_resource_quota("gpuportal-gpu-quota", kube_world.llm.slug).spec.hard[
        "requests.nvidia.com/gpu"] == "1"


def _state(allocation_id: int) -> str:
    from allocations.models import Allocation

    return str(Allocation.objects.values_list("state", flat=True).get(pk=allocation_id))


def _claimed(push_id: int) -> bool:
    push = ClusterPush.objects.get(pk=push_id)
    return push.attempts >= 1 and push.claimed_until is not None and push.state == PushState.PENDING

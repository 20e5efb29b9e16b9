"""Scale benchmark (not a test): one portal, several large clusters, many departments, under load.

Seeds (in bulk, ``bench/scale_seed.py``) ``--clusters`` clusters of ``--nodes`` nodes of 8 GPUs
(A100 MIG and whole nodes, whole, MPS and time-sliced H100 nodes; every other cluster with HAMi,
whose whole H100s also serve the vGPU flavor), ``--departments`` departments in a tree,
``--projects`` projects and ``--users`` people, and a month of usage per department. The first
cluster is reached through the real test API server (``kube_testenv``, as the kube tests start it,
with its nodes registered), the others through the manifests driver. Then it serves the portal
with ``--web`` gunicorn workers and ``--workers`` Celery workers on PostgreSQL and Redis, and runs
``--clients`` client processes (``bench/scale_drive.py``), each a department's admin and
researcher, through five phases of ``--seconds`` each: the trivial ``GET /api/v1/me/``; submits;
approvals of those submits (each client as fast as it is answered); requests submitted and
approved at ``--approval-rate`` a second in all (paced: the push lag target's rate); and a mix of
submits, approvals, releases, GETs, the department's month by day and the request form's
feedback. Prints throughput and p50/p99 per operation, the server CPU per request, the push lag of
every push the approvals queued (approval -> applied, from the push rows), and one line per target
of issue 38 with MET / NOT MET.

    DATABASE_URL=postgres://OWNER:PW@HOST:PORT/DB CELERY_BROKER_URL=redis://HOST:PORT/N \\
        .venv/bin/python bench/scale.py            # 10 x 2,500 nodes, 500 departments, 16 clients
    .venv/bin/python bench/scale.py --quick      # a few minutes on a small machine

Without DATABASE_URL it starts PostgreSQL and Redis with ``scripts/services.sh`` (as ``make test``
does) and stops them after; the broker is ``CELERY_BROKER_URL``, else ``GPUPORTAL_TEST_REDIS_URL``.
The database is a throw-away one, dropped afterwards. ``--no-api-server``: every cluster through
the manifests driver (where ``make kube-testenv`` has not installed the test control plane).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.agent_ingest import CpuWatch, cpu_seconds  # noqa: E402
from bench.portal_server import ServedPortal, celery_workers, portal_served  # noqa: E402
from bench.scale_drive import PhaseResult, Plan, Tally, phase_run  # noqa: E402
from bench.scale_report import Cpu, cpu_lines, lag_line, operation_lines, rate, target_lines  # noqa: E402
from bench.scale_seed import BACKGROUND_KIND, GPUS_PER_NODE, NODE_KINDS, Sizes  # noqa: E402

if TYPE_CHECKING:
    from bench.scale_kube import ApiServer

FULL = {"clusters": 10, "nodes": 2500, "departments": 500, "projects": 5000, "users": 20000, "clients": 16,
        "seconds": 60.0}
QUICK = {"clusters": 3, "nodes": 100, "departments": 30, "projects": 150, "users": 300, "clients": 8, "seconds": 10.0}
MIX = {"get": 3.0, "submit": 2.0, "approve": 2.0, "release": 1.0, "month": 1.0, "feedback": 1.0}
DRAIN_S = 180.0
"""How long the bench waits, after a phase, for the pushes it queued to be delivered."""

SEED = """
import json
from bench.scale_seed import Sizes, clusters_first_push, scale_seed
answer = scale_seed(Sizes(**json.loads({sizes!r})))
answer["first_push_s"] = clusters_first_push()
print(json.dumps(answer))
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, help_text in (("clusters", "clusters"), ("nodes", "nodes of 8 GPUs per cluster"),
                            ("departments", "departments"), ("projects", "projects"), ("users", "people"),
                            ("clients", "client processes"), ("web", "gunicorn workers (default 4)"),
                            ("workers", "Celery workers (default 4)")):
        parser.add_argument(f"--{name}", type=int, help=help_text)
    parser.add_argument("--seconds", type=float, help="seconds per phase (default 60)")
    parser.add_argument("--approval-rate", type=float, default=20.0,
                        help="approvals a second, all clients together, in the paced phase (default 20)")
    parser.add_argument("--quick", action="store_true", help="3 x 100 nodes, 30 departments, 8 clients, 10 s phases")
    parser.add_argument("--no-api-server", action="store_true", help="every cluster through the manifests driver")
    return parser


def options_checked(argv: list[str] | None = None) -> argparse.Namespace:
    """The options with the defaults of the chosen size; a bad value exits with a message naming its option."""
    parser = _parser()
    options = parser.parse_args(argv)
    base = QUICK if options.quick else FULL
    for name, value in {**base, "web": 4, "workers": 4}.items():
        if getattr(options, name) is None:
            setattr(options, name, value)
    for name in ("clusters", "nodes", "departments", "projects", "users", "clients", "web", "workers"):
        if getattr(options, name) < 1:
            parser.error(f"--{name} must be at least 1 (got {getattr(options, name)})")
    for name in ("seconds", "approval_rate"):
        if getattr(options, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be more than 0 (got {getattr(options, name)})")
    if options.projects < options.departments:
        parser.error(f"--projects must be at least --departments ({options.departments}): every department has a project")
    if options.users < 2 * options.departments:
        parser.error(f"--users must be at least twice --departments ({2 * options.departments}): an admin and a "
                     "researcher in each")
    needed = nodes_needed(options.clusters, options.departments)
    if options.nodes < needed:
        parser.error(f"--nodes must be at least {needed} for {options.departments} departments on {options.clusters} "
                     "clusters (each department holds a whole H100)")
    return options


def nodes_needed(clusters: int, departments: int) -> int:
    """Nodes per cluster for every department's background H100 (on every eighth node's kind)."""
    per_cluster = -(-departments // clusters)
    return ((per_cluster - 1) // GPUS_PER_NODE) * len(NODE_KINDS) + BACKGROUND_KIND + 1


def _broker() -> None:
    """The broker the portal and its workers share; ``scripts/services.sh`` when nothing is running."""
    if "DATABASE_URL" not in os.environ:
        from bench.portal_server import services_up

        os.environ.update(services_up())
        os.environ["GPUPORTAL_BENCH_STOP_SERVICES"] = "1"
    if not os.environ.get("CELERY_BROKER_URL"):
        redis = os.environ.get("GPUPORTAL_TEST_REDIS_URL")
        if not redis:
            raise SystemExit("set CELERY_BROKER_URL (or GPUPORTAL_TEST_REDIS_URL) to a Redis URL, or unset DATABASE_URL")
        os.environ["CELERY_BROKER_URL"] = redis


@contextlib.contextmanager
def _api_server(options: argparse.Namespace) -> Iterator[ApiServer | None]:
    """The first cluster's API server, running, or None with ``--no-api-server``."""
    if options.no_api_server:
        yield None
        return
    from bench.scale_kube import ApiServerMissing, api_server

    try:
        with api_server(options.nodes) as server:
            print(f"test API server up in {server.started_s:.1f} s, {server.nodes} nodes registered in "
                  f"{server.registered_s:.1f} s", flush=True)
            yield server
    except ApiServerMissing as error:
        raise SystemExit(f"{error}\n(run `make kube-testenv`, or pass --no-api-server)") from None


def main(argv: list[str] | None = None) -> int:
    options = options_checked(argv)
    _broker()
    stop_services = os.environ.pop("GPUPORTAL_BENCH_STOP_SERVICES", "") == "1"
    try:
        with _api_server(options) as server, tempfile.TemporaryDirectory(prefix="scale-") as logs:
            sizes = Sizes(clusters=options.clusters, nodes=options.nodes, departments=options.departments,
                          projects=options.projects, users=options.users, clients=options.clients,
                          kubeconfig=server.kubeconfig if server else "")
            began = time.perf_counter()
            seed = SEED.format(sizes=json.dumps(sizes.__dict__))
            # A worker busy longer than gunicorn's default 30 s (the placement tables' first build on a
            # loaded machine) is answered late, not killed.
            with portal_served(prefix="bench_scale", seed=seed, workers=options.web, gunicorn_args=("--timeout", "120")) as portal, \
                    celery_workers(portal.env, options.workers, Path(logs)) as workers:
                setup = json.loads(portal.seed_output.strip().splitlines()[-1])
                _header(options, setup, time.perf_counter() - began)
                _drive(options, portal, setup, [worker.pid for worker in workers])
            if server is not None:
                print(f"on the test API server after the run: {server.census()}")
    finally:
        if stop_services:
            import subprocess

            subprocess.run([str(ROOT / "scripts/services.sh"), "down"], check=False)
    return 0


def _header(options: argparse.Namespace, setup: dict[str, Any], elapsed: float) -> None:
    counts = setup["counts"]
    kube = sum(cluster["driver"] == "kubernetes" for cluster in setup["clusters"])
    print(f"{options.clusters} clusters x {options.nodes:,} nodes x 8 GPUs ({kube} on the test API server, the others "
          f"through the manifests driver): {counts['gpus']:,} GPUs with the demo's; {counts['departments']:,} departments, "
          f"{counts['projects']:,} projects, {counts['users']:,} people, {counts['usage_hours']:,} usage hours")
    print(f"seeded in {setup['seed_s']:.1f} s, first full push of every cluster {setup['first_push_s']:.1f} s, "
          f"{elapsed:.0f} s with migrations and the API server")
    print(f"gunicorn {options.web} workers, {options.workers} Celery workers, PostgreSQL and Redis; {options.clients} "
          f"clients, {options.seconds:.0f} s per phase; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs",
          flush=True)


def _drive(options: argparse.Namespace, portal: ServedPortal, setup: dict[str, Any], workers: list[int]) -> None:
    port, seconds = portal.port, options.seconds
    # Each kind of request once or twice per client, and the pushes they queued delivered: no phase
    # pays a process's first connections, placement tables or first push.
    head = _push_head(portal)
    warm = phase_run(port, setup, Plan({"get": 1, "submit": 1, "approve": 1, "feedback": 1, "month": 1}, count=6))
    push_lags(portal, head)
    phases: dict[str, PhaseResult] = {}
    cpu: dict[str, Cpu] = {}
    lags: dict[str, dict[str, Any]] = {}
    carried: list[Tally] | None = warm.tallies
    paced = options.approval_rate / options.clients
    for name, plan in (("get", Plan({"get": 1.0}, seconds=seconds)), ("submit", Plan({"submit": 1.0}, seconds=seconds)),
                       ("approve", Plan({"approve": 1.0}, seconds=seconds)),
                       ("paced", Plan({"grant": 1.0}, seconds=seconds, rate=paced)), ("mix", Plan(MIX, seconds=seconds))):
        first_push = _push_head(portal)
        watch = Watch(portal, workers)
        phases[name] = phase_run(port, setup, plan, carried)
        cpu[name] = watch.stop()
        carried = phases[name].tallies
        if name in ("approve", "paced", "mix"):
            lags[name] = push_lags(portal, first_push)
        print(f"phase {name} done", flush=True)
    print("\n".join(operation_lines(phases)))
    print("\n".join(cpu_lines(phases, cpu)))
    for name, lag in lags.items():
        print(lag_line(name, lag, rate(phases[name], "approve")))
    print("\n".join(target_lines(phases, lags["paced"])))
    print(f"load average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


class Watch:
    """The server's CPU while a phase runs: gunicorn workers and PostgreSQL backends (polled), and
    the Celery workers (read at both ends)."""

    def __init__(self, portal: ServedPortal, workers: list[int]) -> None:
        self.watch = CpuWatch(portal.server.pid, portal.env["DATABASE_URL"])
        self.workers, self.first = workers, cpu_seconds(workers)
        self.done = threading.Event()
        self.poller = threading.Thread(target=self._poll, daemon=True)
        self.poller.start()

    def _poll(self) -> None:
        while not self.done.wait(0.25):
            self.watch.poll()

    def stop(self) -> Cpu:
        self.done.set()
        self.poller.join()
        self.watch.poll()
        used = Cpu(web=self.watch.used("web"), database=self.watch.used("database"),
                   workers=cpu_seconds(self.workers) - self.first)
        self.watch.close()
        return used


def _push_head(portal: ServedPortal) -> int:
    import psycopg

    with psycopg.connect(portal.env["DATABASE_URL"]) as connection:
        row = connection.execute("SELECT coalesce(max(id), 0) FROM clusters_clusterpush").fetchone()
    return int(row[0]) if row else 0


def push_lags(portal: ServedPortal, after: int) -> dict[str, Any]:
    """Each push row queued since ``after``: its lag (queued -> delivered), once the workers have
    delivered them all or ``DRAIN_S`` has passed (those left are counted as not delivered)."""
    import psycopg

    with psycopg.connect(portal.env["DATABASE_URL"], autocommit=True) as connection:
        deadline = time.monotonic() + DRAIN_S
        while time.monotonic() < deadline:
            row = connection.execute("SELECT count(*) FROM clusters_clusterpush WHERE id > %s AND state = 'pending'",
                                     (after,)).fetchone()
            if not row or not row[0]:
                break
            time.sleep(0.5)
        rows = connection.execute(
            "SELECT push.state, extract(epoch FROM push.completed_at - push.created_at), cluster.driver"
            " FROM clusters_clusterpush push JOIN clusters_cluster cluster ON cluster.id = push.cluster_id WHERE push.id > %s"
            " ORDER BY push.id",
            (after,),
        ).fetchall()
    done = [(float(lag), driver) for state, lag, driver in rows if state == "done" and lag is not None]
    return {"lags": [lag for lag, _ in done], "api_server_lags": [lag for lag, driver in done if driver == "kubernetes"],
            "not_done": sum(state != "done" for state, _, _ in rows)}


if __name__ == "__main__":
    sys.exit(main())

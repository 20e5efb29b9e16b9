"""API load benchmark: allocation submit and approve against a trivial authenticated GET.

Starts gunicorn on PostgreSQL (a throw-away database created for the run), seeds the demo data
with room for every request, then runs N concurrent client processes that submit allocations and
approve them, and, in the same run, the same number of clients doing ``GET /api/v1/me/`` as the
baseline. Prints throughput and p50/p99 latency of each, submit-throughput / baseline, and a last
line with each target (``summary``) and whether this run met it.

    DATABASE_URL=postgres://owner:pw@127.0.0.1:5432/db .venv/bin/python bench/api_load.py --clients 16

``--baseline PATH`` (a checkout of an earlier commit: ``mkdir ../before && git archive <commit> |
tar -x -C ../before``) runs the same phases against that code's portal first, each with its own
GET baseline, and ends with both submit/GET ratios. Set ``CELERY_BROKER_URL`` to measure the
hand-over to a broker as in production (without one, tasks run in the request).

Without DATABASE_URL it starts PostgreSQL and Redis with scripts/services.sh and stops them after.
Not a test: it prints figures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.agent_ingest import CpuWatch  # noqa: E402
from bench.portal_server import ROOT, ServedPortal, portal_served  # noqa: E402

SEED = """
from decimal import Decimal
from demo.seed import demo_seed
from allocations.models import Quota
from clusters.models import Cluster, Gpu, Node
from tenants.access_tokens import access_token_create
from django.contrib.auth.models import User
import json
demo_seed()
Quota.objects.update(limit=Decimal("900000"), guaranteed=Decimal("0"))
cluster = Cluster.objects.get(name="demo")
# 2,500 whole-GPU nodes of 8 A100s, so no approval runs out of room; written in bulk (bench seed).
nodes = Node.objects.bulk_create([Node(cluster=cluster, name=f"bench-a100-{n:04d}") for n in range(2500)])
Gpu.objects.bulk_create([Gpu(node=node, index=i, model="NVIDIA-A100-SXM4-80GB", memory_mib=81920)
                         for node in nodes for i in range(8)])
tokens = {name: access_token_create(actor=User.objects.get(username=name), name="bench", scope="write").key
          for name in ("alice", "bob")}
from tenants.models import Project
from allocations.models import Flavor
print(json.dumps({"tokens": tokens, "project": Project.objects.get(slug="nlp-llm").pk,
                  "flavor": Flavor.objects.get(name="a100-80gb").pk}))
"""


CLIENT_TIMEOUT = 60.0
"""Seconds a client waits for an answer (an approval on a busy shared machine may take tens)."""


def client_loop(
    kind: str, port: int, setup: dict[str, object], duration: float, todo: list[int], results: multiprocessing.Queue  # type: ignore[type-arg]
) -> None:
    """One client process: ``baseline`` GETs, ``submit`` POSTs allocations, ``approve`` approves ``todo``."""
    tokens = setup["tokens"]
    assert isinstance(tokens, dict)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT)
    latencies: list[float] = []
    created: list[int] = []
    errors = 0
    starts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 60))
    ends = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 86400))

    def call(method: str, path: str, token: str, body: dict[str, object] | None = None) -> tuple[int, dict[str, object]]:
        """The status and the answer; 0 (an error, no latency) when the server did not answer in
        time or dropped the connection, which is opened again for the next request."""
        nonlocal connection
        headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        began = time.perf_counter()
        try:
            connection.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
            response = connection.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException):
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT)
            return 0, {}
        latencies.append(time.perf_counter() - began)
        return response.status, (json.loads(payload) if payload else {})

    deadline = time.perf_counter() + duration
    while time.perf_counter() < deadline:
        if kind == "baseline":
            status, _ = call("GET", "/api/v1/me/", tokens["alice"])
            errors += status != 200
        elif kind == "submit":
            body = {"project": setup["project"], "flavor": setup["flavor"], "quantity": 1,
                    "starts_at": starts, "ends_at": ends, "justification": f"bench {uuid.uuid4().hex[:8]}"}
            status, answer = call("POST", "/api/v1/allocations/", tokens["alice"], body)
            if status == 201:
                created.append(int(str(answer["id"])))
            else:
                errors += 1
        else:
            if not todo:
                break
            status, _ = call("POST", f"/api/v1/allocations/{todo.pop()}/approve/", tokens["bob"], {"comment": "bench"})
            errors += status != 200
    results.put((latencies, created, errors))


@dataclass(frozen=True)
class Load:
    """How hard a phase presses: how many clients, for how many seconds."""

    clients: int
    duration: float


def run_phase(
    kind: str, port: int, setup: dict[str, object], load: Load, todo: list[int] | None = None,
    portal: ServedPortal | None = None,
) -> dict[str, object]:
    """One phase; with ``portal``, also the server's CPU time it took (gunicorn workers and the
    PostgreSQL backends of the bench database), polled while it runs."""
    clients, duration = load.clients, load.duration
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    chunks = [(todo or [])[index::clients] for index in range(clients)]
    processes = [
        context.Process(target=client_loop, args=(kind, port, setup, duration, chunks[index], results))
        for index in range(clients)
    ]
    began = time.perf_counter()
    for process in processes:
        process.start()
    watch = CpuWatch(portal.server.pid, portal.env["DATABASE_URL"]) if portal is not None else None
    stop = threading.Event()
    poller = threading.Thread(target=poll_until, args=(watch, stop), daemon=True)
    if watch is not None:
        poller.start()
    collected = [results.get(timeout=duration + 120) for _ in processes]
    for process in processes:
        process.join()
    elapsed = time.perf_counter() - began
    cpu = {"web": 0.0, "database": 0.0}
    if watch is not None:
        stop.set()
        poller.join()
        watch.poll()
        cpu = {part: watch.used(part) for part in cpu}
        watch.close()
    return {
        "elapsed": elapsed,
        "latencies": [latency for latencies, _, _ in collected for latency in latencies],
        "created": [pk for _, created, _ in collected for pk in created],
        "errors": sum(errors for _, _, errors in collected),
        "cpu": cpu,
    }


def poll_until(watch: CpuWatch | None, stop: threading.Event) -> None:
    while watch is not None and not stop.wait(0.25):
        watch.poll()


def cpu_line(name: str, phase: dict[str, Any]) -> tuple[float, str]:
    """Server CPU per request of a phase: what the figures would be on cores of its own."""
    count = len(phase["latencies"])
    if not count:
        return float("nan"), f"{name:<10} no requests"
    web, database = phase["cpu"]["web"] / count, phase["cpu"]["database"] / count
    return web + database, (
        f"{name:<10} server CPU per request {(web + database) * 1000:6.2f} ms"
        f" (gunicorn {web * 1000:.2f} ms, PostgreSQL backends {database * 1000:.2f} ms)"
    )


def describe(name: str, latencies: list[float], elapsed: float) -> tuple[float, str]:
    if not latencies:
        return 0.0, f"{name:<10} no requests"
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    throughput = len(ordered) / elapsed
    return throughput, (
        f"{name:<10} {len(ordered):>7} requests  {throughput:8.1f}/s  p50 {statistics.median(ordered) * 1000:7.1f} ms"
        f"  p99 {p99 * 1000:7.1f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per phase")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
    parser.add_argument("--baseline", help="a checkout of an earlier commit, measured the same way in the same run")
    options = parser.parse_args()
    codes = {"this checkout": ROOT} | ({"baseline": Path(options.baseline).resolve()} if options.baseline else {})
    measured = {}
    for label, root in reversed(codes.items()):  # the baseline first, as the older code
        print(f"== {label} ({root.name})")
        measured[label] = measure(root, options)
    if options.baseline:
        print("== submit / GET, both in the same run (load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")  # fmt: skip
        for label, figures in measured.items():
            rates, p99s, cpus = figures
            print(f"{label:<14} throughput {rates['submit'] / rates['GET /me']:.2f}, p99 {p99s['submit'] / p99s['GET /me']:.2f}x,"
                  f" server CPU per request {cpus['submit'] / cpus['GET /me']:.2f}x (submit {cpus['submit'] * 1000:.2f} ms)")  # fmt: skip
    return 0


def measure(root: Path, options: argparse.Namespace) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """The three phases against the portal of checkout ``root``; prints their figures and targets and
    returns throughput, p99 and server CPU per request by phase."""
    with portal_served(prefix="bench", seed=SEED, workers=options.workers, root=root) as portal:
        setup = json.loads(portal.seed_output.strip().splitlines()[-1])
        port = portal.port
        broker = "Redis (tasks enqueued)" if portal.env.get("CELERY_BROKER_URL") else "in-process tasks"
        print(f"gunicorn {options.workers} workers on PostgreSQL, {broker}, {options.clients} clients, "
              f"{options.duration:.0f} s per phase")
        # Warm up each kind of request, so that no phase pays a worker's first database and broker
        # connections or the placement engine's first build (once per process) in its figures.
        run_phase("baseline", port, setup, Load(2, 2.0))
        warm = run_phase("submit", port, setup, Load(2, 2.0))
        run_phase("approve", port, setup, Load(2, 2.0), todo=list(warm["created"])[: 2 * options.workers])  # type: ignore[call-overload]
        baseline = run_phase("baseline", port, setup, Load(options.clients, options.duration), portal=portal)
        submitted = run_phase("submit", port, setup, Load(options.clients, options.duration), portal=portal)
        created = list(submitted["created"])  # type: ignore[call-overload]
        approved = run_phase("approve", port, setup, Load(options.clients, options.duration), todo=created, portal=portal)
    phases = (("GET /me", baseline), ("submit", submitted), ("approve", approved))
    rates, p99s, cpus = {}, {}, {}
    for name, phase in phases:
        latencies = list(phase["latencies"])  # type: ignore[call-overload]
        rates[name], line = describe(name, latencies, float(phase["elapsed"]))  # type: ignore[arg-type]
        p99s[name] = percentile(latencies, 0.99)
        print(line)
    for name, phase in phases:
        cpus[name], line = cpu_line(name, phase)
        print(line)
    print(f"errors: baseline {baseline['errors']}, submit {submitted['errors']}, approve {approved['errors']}")
    print(f"ratio submit-throughput / baseline-throughput: {rates['submit'] / rates['GET /me']:.2f}")
    print(f"ratio baseline / submit server CPU per request: {cpus['GET /me'] / cpus['submit']:.2f} (the throughput"
          f" ratio on cores of their own, clients aside; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    print(summary(rates=rates, p99s=p99s, clients=options.clients))
    return rates, p99s, cpus


THROUGHPUT_RATIO_TARGET = 0.5
"""Submit throughput at least half the baseline's, in the same run."""
P99_RATIO_TARGET = 2.0
"""Submit p99 at most twice the baseline's, in the same run."""
APPROVALS_TARGET = 20.0
"""Approvals per second at 16 clients on the 2,500-node cluster."""


def percentile(latencies: list[float], fraction: float) -> float:
    if not latencies:
        return float("nan")
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def summary(*, rates: dict[str, float], p99s: dict[str, float], clients: int) -> str:
    """One line: each target, the figure measured and whether it is met."""
    baseline_rate, baseline_p99 = rates["GET /me"], p99s["GET /me"]
    ratio = rates["submit"] / baseline_rate if baseline_rate else 0.0
    p99_ratio = p99s["submit"] / baseline_p99 if baseline_p99 else float("inf")
    checks = [
        (f"submit/baseline throughput {ratio:.2f} >= {THROUGHPUT_RATIO_TARGET}", ratio >= THROUGHPUT_RATIO_TARGET),
        (f"submit p99/baseline p99 {p99_ratio:.2f} <= {P99_RATIO_TARGET}", p99_ratio <= P99_RATIO_TARGET),
        (f"approvals {rates['approve']:.1f}/s >= {APPROVALS_TARGET:.0f}/s at {clients} clients",
         rates["approve"] >= APPROVALS_TARGET),
    ]  # fmt: skip
    return "targets: " + "; ".join(f"{text} {'MET' if met else 'NOT MET'}" for text, met in checks)


if __name__ == "__main__":
    sys.exit(main())

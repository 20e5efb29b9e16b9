"""Node agent ingest benchmark: reports of 1,000 nodes × 8 GPUs posted as fast as the portal takes them.

Starts gunicorn on PostgreSQL (a throw-away database created for the run), registers the nodes,
their GPUs and one node token each, then runs N client processes that post agent reports (the
8 × H200 recording read by the agent's own collector, one per node with its own UUIDs) round-robin
over the nodes with increasing sequence numbers. The first report of each node fills the inventory
and is timed apart; then the steady phase runs for ``--duration`` seconds. Prints reports per
second, p50/p99 latency, and the ratio to the rate that 1,000 nodes reporting every 30 s need.

    DATABASE_URL=postgres://owner:pw@127.0.0.1:5432/db .venv/bin/python bench/agent_ingest.py --clients 8

Without DATABASE_URL it starts PostgreSQL and Redis with scripts/services.sh and stops them after.
``--settings`` names the Django settings (default gpuportal.settings). Not a test: it prints figures,
it asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import multiprocessing
import os
import queue
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.portal_server import portal_served  # noqa: E402

PYTHON = sys.executable
INTERVAL = 30
NAMESPACE = uuid.UUID("6d1f4a52-7a1e-4c59-9a3e-8f1d2b3c4d5e")

SEED = """
import json, sys
from clusters.models import Cluster, Gpu, Node
from telemetry import tokens
from telemetry.models import NodeToken
nodes, gpus = int(sys.argv[1]), int(sys.argv[2])
cluster = Cluster.objects.create(name="bench")
created = Node.objects.bulk_create(
    [Node(cluster=cluster, name=f"gpu-node-{i:04d}", cpu_millicores=192000, memory_mib=2097152) for i in range(nodes)]
)
Gpu.objects.bulk_create(
    [Gpu(node=node, index=i, model="NVIDIA-H200", memory_mib=143771, mig_capable=True) for node in created for i in range(gpus)]
)
issued = {}
rows = []
for node in created:
    new = tokens.token_generate()
    rows.append(NodeToken(cluster=cluster, node_name=node.name, key_id=new.key_id, secret_hash=new.secret_hash))
    issued[node.name] = new.text
NodeToken.objects.bulk_create(rows)
print(json.dumps(issued))
"""


def recorded_report() -> dict[str, Any]:
    """The 8 × H200 recording as the agent's collector reports it (through the tests' NVML replay)."""
    import pytest

    from agent.collector import ReportContext, collect_report
    from agent.nvml_calls import nvml_session
    from tests.agent.nvml_replay import NvmlReplay, load_recording, write_proc_root

    recording = load_recording("h200-8gpu-node")
    started = datetime.datetime.now(datetime.UTC)
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as monkeypatch:
        proc_root = write_proc_root(recording, Path(folder) / "proc")
        proc_root.mkdir(exist_ok=True)
        NvmlReplay(recording).install(monkeypatch)
        context = ReportContext(
            node_name="template", sequence=0, agent_started_at=started, interval_seconds=INTERVAL, proc_root=proc_root
        )
        with nvml_session():
            return dict(collect_report(context, now=started))


def body_template(report: dict[str, Any], node_name: str) -> bytes:
    """The node's report as JSON with placeholders for what changes from one report to the next."""
    node = copy_report(report)
    node["node_name"] = node_name
    node["sequence"] = "__SEQ__"
    node["collected_at"] = "__AT__"
    for gpu in node["gpus"]:
        gpu["uuid"] = "GPU-" + str(uuid.uuid5(NAMESPACE, f"{node_name}/{gpu['index']}"))
        gpu["memory_used_bytes"] = f"__MEM{gpu['index']}__"
        if gpu["utilization"] is not None:
            gpu["utilization"]["gpu_percent"] = f"__UTIL{gpu['index']}__"
    return json.dumps(node, separators=(",", ":")).encode()


def copy_report(report: dict[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = json.loads(json.dumps(report))
    return copied


def fill(template: bytes, sequence: int, gpus: int) -> bytes:
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    body = template.replace(b'"__SEQ__"', str(sequence).encode()).replace(b"__AT__", now.encode())
    for index in range(gpus):
        body = body.replace(f'"__MEM{index}__"'.encode(), str(1_000_000_000 + sequence * 4096 + index).encode())
        body = body.replace(f'"__UTIL{index}__"'.encode(), str((sequence * 7 + index) % 101).encode())
    return body


def client_loop(
    port: int, work: list[tuple[str, str, bytes]], gpus: int, first_sequence: int, duration: float,
    results: multiprocessing.Queue,  # type: ignore[type-arg]
) -> None:
    """Post reports for ``work`` (node, token, template) round-robin until ``duration`` ends
    (``duration`` 0: one report per node)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    sequence = first_sequence
    deadline = time.perf_counter() + duration
    while True:
        for name, token, template in work:
            body = fill(template, sequence, gpus)
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            began = time.perf_counter()
            connection.request("POST", f"/api/v1/nodes/{name}/report", body=body, headers=headers)
            response = connection.getresponse()
            response.read()
            latencies.append(time.perf_counter() - began)
            statuses[response.status] = statuses.get(response.status, 0) + 1
            if duration and time.perf_counter() >= deadline:
                results.put((latencies, statuses))
                return
        sequence += 1
        if not duration:
            results.put((latencies, statuses))
            return


@dataclass(frozen=True)
class Phase:
    """One phase of reports: how many clients send them, the sequence number they start at and for
    how long (0: each client's share of the work once)."""

    clients: int
    first_sequence: int
    duration: float


def run_phase(
    port: int, work: list[tuple[str, str, bytes]], gpus: int, phase: Phase, watch: CpuWatch | None = None,
) -> dict[str, Any]:
    clients, first_sequence, duration = phase.clients, phase.first_sequence, phase.duration
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    processes = [
        context.Process(target=client_loop, args=(port, work[index::clients], gpus, first_sequence, duration, results))
        for index in range(clients)
    ]
    began = time.perf_counter()
    for process in processes:
        process.start()
    collected: list[tuple[list[float], dict[int, int]]] = []
    deadline = time.monotonic() + max(duration, 60) + 600
    while len(collected) < len(processes) and time.monotonic() < deadline:
        try:
            collected.append(results.get(timeout=0.5))
        except queue.Empty:
            pass
        if watch is not None:
            watch.poll()
    for process in processes:
        process.join()
    elapsed = time.perf_counter() - began
    statuses: dict[int, int] = {}
    for _, counts in collected:
        for code, count in counts.items():
            statuses[code] = statuses.get(code, 0) + count
    return {"elapsed": elapsed, "latencies": [value for values, _ in collected for value in values], "statuses": statuses}


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of the processes (those that still exist)."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


class CpuWatch:
    """CPU time of the gunicorn workers and of the PostgreSQL backends serving the bench database,
    polled while a phase runs (backends come and go as Django recycles its connections)."""

    def __init__(self, gunicorn: int, database_url: str) -> None:
        import psycopg

        self.gunicorn = gunicorn
        self.connection = psycopg.connect(database_url, autocommit=True)
        self.first: dict[tuple[str, int], float] = {}
        self.last: dict[tuple[str, int], float] = {}
        self.poll(baseline=True)

    def _workers(self) -> list[int]:
        workers = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == self.gunicorn:
                    workers.append(int(stat.parent.name))
            except (OSError, ValueError, IndexError):
                continue
        return workers

    def _backends(self) -> list[int]:
        rows = self.connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
        return [int(row[0]) for row in rows]

    def poll(self, baseline: bool = False) -> None:
        for kind, pids in (("web", self._workers()), ("database", self._backends())):
            for pid in pids:
                used = cpu_seconds([pid])
                self.first.setdefault((kind, pid), used if baseline else 0.0)
                self.last[(kind, pid)] = used

    def used(self, kind: str) -> float:
        return sum(self.last[key] - self.first[key] for key in self.last if key[0] == kind)

    def close(self) -> None:
        self.connection.close()


def analyze(database_url: str) -> None:
    """Bring the planner's statistics up to date, as autovacuum does within its minute in
    production: the first reports have just filled the observed GPUs, and on statistics taken when
    the tables were empty the planner joins every report's GPUs by scanning the whole inventory."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("ANALYZE")


def describe(name: str, phase: dict[str, Any]) -> tuple[float, str]:
    ordered = sorted(phase["latencies"])
    if not ordered:
        return 0.0, f"{name:<16} no reports"
    rate = len(ordered) / phase["elapsed"]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return rate, (
        f"{name:<16} {len(ordered):>7} reports {rate:8.1f}/s  p50 {statistics.median(ordered) * 1000:7.1f} ms"
        f"  p99 {p99 * 1000:7.1f} ms  statuses {dict(sorted(phase['statuses'].items()))}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=8, help="client processes")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of the steady phase")
    parser.add_argument("--settings", default="gpuportal.settings", help="DJANGO_SETTINGS_MODULE for the server")
    options = parser.parse_args()

    gpus = 8
    seed = f"import sys; sys.argv = ['seed', '{options.nodes}', '{gpus}']\n" + SEED
    # Nothing here enqueues tasks: keep the run free of the broker.
    with portal_served(
        prefix="bench_ingest", seed=seed, workers=options.workers, settings_module=options.settings, use_broker=False
    ) as portal:
        env, port, server = portal.env, portal.port, portal.server
        issued: dict[str, str] = json.loads(portal.seed_output.strip().splitlines()[-1])
        template = recorded_report()
        gpus = len(template["gpus"])
        work = [(name, token, body_template(template, name)) for name, token in sorted(issued.items())]
        print(
            f"gunicorn {options.workers} workers on PostgreSQL, {options.clients} clients, {len(work)} nodes × {gpus} GPUs,"
            f" {len(fill(work[0][2], 1, gpus))} bytes per report, steady phase {options.duration:.0f} s"
        )
        first = run_phase(port, work, gpus, Phase(options.clients, 1, 0))
        analyze(env["DATABASE_URL"])
        watch = CpuWatch(server.pid, env["DATABASE_URL"])
        steady = run_phase(port, work, gpus, Phase(options.clients, 2, options.duration), watch)
        watch.poll()
        cpu_web, cpu_database = watch.used("web"), watch.used("database")
        watch.close()
        _, first_line = describe("first reports", first)
        rate, steady_line = describe("steady reports", steady)
        print(first_line)
        print(steady_line)
        needed = len(work) / INTERVAL
        print(f"needed for {len(work)} nodes every {INTERVAL} s: {needed:.1f}/s; ratio {rate / needed:.2f} (target >= 10)")
        count = len(steady["latencies"])
        if count:
            per_report = (cpu_web + cpu_database) / count
            print(
                f"server CPU per steady report: {per_report * 1000:.2f} ms (gunicorn {cpu_web / count * 1000:.2f} ms,"
                f" PostgreSQL backends {cpu_database / count * 1000:.2f} ms): one core takes {1 / per_report:.0f}"
                f" reports/s, ratio {1 / per_report / needed:.1f} per core; load average {os.getloadavg()[0]:.1f}"
                f" on {os.cpu_count()} CPUs"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark of the custody ledger on PostgreSQL (a benchmark, not a timed test).

    DATABASE_URL=postgres://OWNER:PW@HOST:PORT/DB nice .venv/bin/python bench/custody.py \\
        [--agents 8] [--reports 150] [--gpus 64] [--days 30] [--queries 200]

The full size of the targets (one year of history of 10,000 GPUs):

    DATABASE_URL=... .venv/bin/python bench/custody.py --gpus 10000 --days 365

It creates a scratch database next to DB (``<DB>_custody_bench``, dropped first; the owner needs
CREATEDB), migrates it, and prints:

1. ingest: ``--agents`` processes, one node each (8 GPUs), each sending ``--reports`` reports
   through ``custody_report_apply`` in its own transaction, as the report endpoint does; every
   report moves every GPU to a new pod (8 intervals closed, 8 opened: 16 ledger events). Against
   the same processes writing the same number of rows of the same width per transaction into a
   bare table (no chain, no attribution): the ratio says what the ledger's own work costs.
   Target: >= 1,000 events/s.
2. "who held device X between t1 and t2": a history of ``--gpus`` GPUs over ``--days`` days (a
   closed interval every 6 hours per GPU, chained per node as the ledger writes them), then
   ``--queries`` questions through ``custody.selectors.custody_answer`` (a random GPU, a random
   day); p95 at that size and at a quarter of the GPUs in the same run: the ratio shows the query
   reads one device's rows, whatever the size of the history. Target: p95 <= 2 s.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)

import argparse  # noqa: E402
import datetime  # noqa: E402
import multiprocessing  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402
from urllib.parse import urlparse, urlunparse  # noqa: E402

BENCH_SUFFIX = "_custody_bench"
START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
EVENTS_TARGET = 1000.0
P95_TARGET = 2.0


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def django_setup(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuportal.settings")
    os.environ.setdefault("GPUPORTAL_SECRET_KEY", "bench-only-" + "k" * 40)
    import django

    django.setup()


def child_setup(url: str, agents: int, gpus: int) -> None:
    """Migrate; a cluster with the ingest's nodes and the history's nodes (8 GPUs each)."""
    django_setup(url)
    from django.core.management import call_command

    from allocations.models import Reservation
    from clusters.models import Cluster, Gpu, Node

    call_command("migrate", verbosity=0)
    cluster = Cluster.objects.create(name="bench")
    grant = _bench_grant(cluster)
    for name in [f"agent-{i}" for i in range(agents)] + [f"hist-{i}" for i in range((gpus + 7) // 8)]:
        node = Node.objects.create(cluster=cluster, name=name)
        Gpu.objects.bulk_create(Gpu(node=node, index=i, model="H100", memory_mib=81920, uuid=f"GPU-{name}-{i}")
                                for i in range(8))  # fmt: skip
        if name.startswith("agent-"):  # the agents' pods run under a grant booked on their GPUs: no alarm
            Reservation.objects.create(allocation=grant, unit=int(name.split("-")[1]), node=node,
                                       gpu_indices=list(range(8)), gpu_milli=1000)  # fmt: skip
    Reservation.objects.update(created_at=START - datetime.timedelta(days=1))


def _bench_grant(cluster: Any) -> Any:
    """An active grant of project ``bench``, begun before the benchmark's reports."""
    from decimal import Decimal

    from django.contrib.auth.models import User

    from allocations.models import Allocation, AllocationState, Flavor, PriorityClass
    from tenants.models import Department, Project

    project = Project.objects.create(slug="bench", name="Bench", department=Department.objects.create(slug="d", name="D"))
    flavor = Flavor.objects.create(name="h100", display_name="H100", gpu_model="H100", sharing_mode="exclusive",
                                   resource_name="nvidia.com/gpu", memory_mib=81920, compute_percent=100,
                                   gpu_equivalents=Decimal("1"))  # fmt: skip
    return Allocation.objects.create(
        project=project, flavor=flavor, quantity=64, priority_class=PriorityClass.objects.create(name="p", value=1),
        cluster=cluster, starts_at=START - datetime.timedelta(days=1), ends_at=START + datetime.timedelta(days=400),
        justification="bench", state=AllocationState.ACTIVE, requested_by=User.objects.create(username="bench"),
    )


def _report(node: str, sequence: int) -> dict[str, Any]:
    moment = START + datetime.timedelta(seconds=30 * sequence)
    return {
        "agent_started_at": "2026-01-01T00:00:00.000Z", "sequence": sequence,
        "collected_at": moment.strftime("%Y-%m-%dT%H:%M:%S.000Z"), "interval_seconds": 30, "clock_offset_seconds": 0.0,
        "gpus": [], "pod_resources_error": None,
        "pod_devices": [{"namespace": "bench", "pod": f"job-{sequence}-{i}", "pod_uid": f"uid-{sequence}-{i}",
                         "container": "main", "resource": "nvidia.com/gpu", "device_id": f"GPU-{node}-{i}",
                         "sharing": "exclusive"} for i in range(8)],
    }  # fmt: skip


def _agent(url: str, index: int, reports: int, mode: str, barrier: Any, done: Any) -> None:
    django_setup(url)
    from django.db import connection, transaction

    from clusters.models import Node
    from custody.ingest import custody_report_apply

    node = Node.objects.select_related("cluster").get(name=f"agent-{index}")
    connection.ensure_connection()
    barrier.wait()
    for sequence in range(1, reports + 1):
        with transaction.atomic():
            if mode == "bare":
                with connection.cursor() as cursor:
                    cursor.executemany("INSERT INTO bench_bare VALUES (%s, %s, %s)",
                                       [(index, sequence, "x" * 400) for _ in range(16)])  # fmt: skip
            else:
                custody_report_apply(node=node, report=_report(node.name, sequence), received_at=START)
    done.put(time.monotonic())


def ingest(url: str, agents: int, reports: int, mode: str) -> float:
    """Events (or bare rows) per second of ``agents`` processes; events counted from the ledger."""
    if mode == "bare":
        import psycopg

        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("CREATE TABLE IF NOT EXISTS bench_bare (agent int, seq int, payload text)")
    context = multiprocessing.get_context("spawn")
    barrier, done = context.Barrier(agents + 1), context.Queue()
    workers = [context.Process(target=_agent, args=(url, i, reports, mode, barrier, done)) for i in range(agents)]
    for worker in workers:
        worker.start()
    barrier.wait()
    started = time.monotonic()
    finished: float = max(done.get() for _ in workers)
    for worker in workers:
        worker.join()
    # 16 events a report after the first (which opens 8): what the ledger holds for these agents
    events = agents * (8 + 16 * (reports - 1))
    return float(events / (finished - started))


def child_history(url: str, gpus: int, days: int) -> int:
    """Closed intervals every 6 hours on ``gpus`` GPUs, chained per node; the rows written."""
    django_setup(url)
    from clusters.models import Node
    from custody.chain import GENESIS, row_hash
    from custody.models import CustodyEvent

    written = 0
    for node in Node.objects.filter(name__startswith="hist-").select_related("cluster").order_by("pk"):
        head, seq, rows = GENESIS, 0, []
        for step in range(days * 4):
            for gpu in range(8):
                if int(node.name.split("-")[1]) * 8 + gpu >= gpus:
                    continue
                seq += 1
                started = START + datetime.timedelta(hours=6 * step)
                row = _history_row(node, gpu, seq, started, head)
                head = row["hash"] = row_hash(row)
                rows.append(CustodyEvent(**row))
        CustodyEvent.objects.bulk_create(rows, batch_size=5000)
        written += len(rows)
    return written


def _history_row(node: Any, gpu: int, seq: int, started: datetime.datetime, head: str) -> dict[str, Any]:
    ended = started + datetime.timedelta(hours=5, minutes=30)
    return {
        "node_id": node.pk, "chain_seq": seq, "kind": "closed", "recorded_at": ended, "cluster": node.cluster.name,
        "node": node.name, "gpu_uuid": f"GPU-{node.name}-{gpu}", "device_id": f"GPU-{node.name}-{gpu}",
        "resource": "nvidia.com/gpu", "sharing": "exclusive", "namespace": "bench", "pod": f"job-{seq}",
        "pod_uid": f"uid-{node.pk}-{seq}", "container": "main", "project_id": 1, "department_id": 1,
        "allocation_id": 1, "attribution": "granted", "started_at": started, "start_observed": "appeared",
        "ended_at": ended, "end_observed": "gone", "gone_at": ended, "confidence": "high", "gap_cause": "",
        "opened_seq": None, "prev_hash": head,
    }  # fmt: skip


def child_queries(url: str, gpus: int, days: int, queries: int) -> list[float]:
    django_setup(url)
    from django.db import connection

    from custody.selectors import CustodyQuery, custody_answer

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE custody_event")
    generator = random.Random(7)  # noqa: S311 - reproducible questions
    timings = []
    for _ in range(queries):
        gpu = generator.randrange(gpus)
        day = START + datetime.timedelta(days=generator.randrange(days))
        query = CustodyQuery(device=f"GPU-hist-{gpu // 8}-{gpu % 8}", time_from=day, time_to=day + datetime.timedelta(days=1))
        began = time.perf_counter()
        rows, _ = custody_answer(query=query)
        timings.append(time.perf_counter() - began)
        assert len(rows) in (4, 5), len(rows)  # a day holds four intervals (five with the one across midnight)
    return timings


def run(target: Any, *args: Any) -> Any:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(target, args)


def p95(timings: list[float]) -> float:
    return statistics.quantiles(timings, n=20)[-1]


def scratch_database(owner_url: str) -> str:
    import psycopg

    name = (urlparse(owner_url).path.lstrip("/") or "gpuportal") + BENCH_SUFFIX
    maintenance = urlunparse(urlparse(owner_url)._replace(path="/postgres"))
    with psycopg.connect(maintenance, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}"')
        connection.execute(f'CREATE DATABASE "{name}"')
    return urlunparse(urlparse(owner_url)._replace(path="/" + name))


def verdict(met: bool) -> str:
    return "MET" if met else "NOT MET"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--reports", type=int, default=150)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--queries", type=int, default=200)
    arguments = parser.parse_args()
    owner_url = os.environ.get("DATABASE_URL", "")
    if not owner_url.startswith("postgres"):
        raise SystemExit("set DATABASE_URL to the owner's postgres:// URL")
    url = scratch_database(owner_url)
    run(child_setup, url, arguments.agents, arguments.gpus)
    bare = ingest(url, arguments.agents, arguments.reports, "bare")
    ledger = ingest(url, arguments.agents, arguments.reports, "ledger")
    say(f"ingest, {arguments.agents} agents: {ledger:,.0f} custody events/s; bare rows in the same transactions "
        f"{bare:,.0f}/s (ratio {ledger / bare:.2f}); target >= {EVENTS_TARGET:,.0f}: {verdict(ledger >= EVENTS_TARGET)}")
    quarter = max(8, arguments.gpus // 4)
    rows = run(child_history, url, arguments.gpus, arguments.days)
    small = p95(run(child_queries, url, quarter, arguments.days, arguments.queries))
    full = p95(run(child_queries, url, arguments.gpus, arguments.days, arguments.queries))
    say(f"history: {rows:,} ledger rows ({arguments.gpus} GPUs x {arguments.days} days)")
    say(f"who held device X on a day: p95 {full * 1000:.1f} ms over {arguments.gpus} GPUs, {small * 1000:.1f} ms "
        f"over the first {quarter} in the same run (ratio {full / small:.2f}); target <= {P95_TARGET:.0f} s: "
        f"{verdict(full <= P95_TARGET)}")


if __name__ == "__main__":
    main()

"""Benchmark (not a timed test): how long "why is it waiting" and "simulate" take with many pending
requests and many nodes (docs/pending.md).

    DATABASE_URL=postgres://OWNER:PW@HOST:PORT/DB .venv/bin/python bench/why.py [--pending 10000] [--nodes 2500] [--grants 200] [--calls 40]
    .venv/bin/python bench/why.py --quick

With ``DATABASE_URL`` a PostgreSQL owner's URL, on a scratch database next to it (``<DB>_why``,
dropped first and after), else on a throw-away SQLite file (where the clusters' placement states
are read afresh on every decision, as the embedded default does: slower). Departments acme →
nlp, vision; one cluster of ``--nodes`` nodes of 8 A100 each (half of them MIG's mixed strategy);
``--grants`` running grants of vision (one A100 each, ending one after another over ten days)
that fill acme's GPU-equivalent limit but for 4; ``--pending`` pending requests of both
departments. Then, in process through the API (DRF's test client, a researcher of nlp):

- ``GET /api/v1/allocations/{id}/why/`` of nlp's 8-A100 request that acme's limit refuses: the
  reason, the holders, the alternatives (fewer units, on the cluster's GPUs) and the estimate
  (admission decided at the moments vision's grants end), the heavy case;
- the same of a 1-A100 request that fits (one decision);
- ``POST /api/v1/allocations/simulate/`` with the refused request's body;
- ``GET /api/v1/me/``, the baseline, in the same run.

Printed: p50 and p95 of each, the ratio of each p95 to the baseline's, and MET / NOT MET for the
target (p95 ≤ 500 ms at 10,000 pending requests and 2,500 nodes); a run smaller than that prints
NOT MEASURED for the target.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

A100 = "NVIDIA-A100-SXM4-80GB"
TARGET_MS = 500.0
TARGET_PENDING, TARGET_NODES = 10_000, 2_500


def scratch_url(owner: str) -> str:
    """A scratch database next to the owner's PostgreSQL one (``<DB>_why``)."""
    parts = urlsplit(owner)
    return urlunsplit((parts.scheme, parts.netloc, parts.path + "_why", parts.query, parts.fragment))


def scratch(owner: str, *, create: bool) -> None:
    import psycopg

    name = urlsplit(scratch_url(owner)).path.lstrip("/")
    parts = urlsplit(owner)
    maintenance = urlunsplit((parts.scheme, parts.netloc, "/postgres", parts.query, parts.fragment))
    with psycopg.connect(maintenance, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if create:
            connection.execute(f'CREATE DATABASE "{name}"')


def setup_django(work: Path, database: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "gpuportal.settings_test"
    os.environ["DATABASE_URL"] = database or f"sqlite:///{work / 'bench.sqlite3'}"
    os.environ.pop("GPUPORTAL_APP_DATABASE_URL", None)  # the scratch database is the owner's
    os.environ["GPUPORTAL_VAR_DIR"] = str(work)
    os.environ["GPUPORTAL_MANIFESTS_DIR"] = str(work / "manifests")
    os.environ.setdefault("GPUPORTAL_LOG_FORMAT", "console")
    os.environ.pop("CELERY_BROKER_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def seed_cluster(nodes: int) -> Any:
    from clusters.inventory import GpuSpec, node_upsert
    from clusters.models import Cluster, Node, NodeSharing

    cluster = Cluster.objects.create(name="bench")
    for index in range(nodes):
        node_upsert(actor=None, cluster=cluster, name=f"a100-{index:05d}", cpu_millicores=128000, memory_mib=1048576,
                    gpus=[GpuSpec(index=i, model=A100, memory_mib=81920, mig_capable=True) for i in range(8)])
    Node.objects.filter(cluster=cluster, name__regex=r"[02468]$").update(sharing=NodeSharing.MIG)
    return cluster


def seed(*, nodes: int, grants: int, pending: int) -> dict[str, Any]:
    """The scene; returns the researcher, the two requests asked about and the simulate body."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from allocations.models import Allocation, AllocationState, Flavor, PriorityClass, Quota, SharingMode
    from tenants.models import Department, Membership, Project, Role

    acme = Department.objects.create(slug="acme", name="ACME")
    nlp = Department.objects.create(slug="nlp", name="NLP", parent=acme)
    vision = Department.objects.create(slug="vision", name="Vision", parent=acme)
    alice, bob, dave = (User.objects.create(username=name) for name in ("alice", "bob", "dave"))
    Membership.objects.create(user=alice, department=nlp, role=Role.RESEARCHER)
    Membership.objects.create(user=bob, department=nlp, role=Role.DEPARTMENT_ADMIN)
    Membership.objects.create(user=dave, department=vision, role=Role.RESEARCHER)
    llm = Project.objects.create(slug="nlp-llm", name="LLM", department=nlp)
    llm.members.add(alice)
    seg = Project.objects.create(slug="vision-seg", name="Seg", department=vision)
    a100 = Flavor.objects.create(name="a100", display_name="A100", gpu_model=A100, sharing_mode=SharingMode.EXCLUSIVE,
                                 resource_name="nvidia.com/gpu", memory_mib=81920, compute_percent=100,
                                 gpu_equivalents=Decimal(1))
    standard = PriorityClass.objects.create(name="gpu-standard", value=1000)
    Quota.objects.create(department=acme, flavor=None, guaranteed=Decimal(0), limit=Decimal(grants + 4))
    Quota.objects.create(department=nlp, flavor=None, guaranteed=Decimal(0), limit=Decimal(100000))
    Quota.objects.create(department=vision, flavor=None, guaranteed=Decimal(0), limit=Decimal(100000))
    cluster = seed_cluster(nodes)
    now = timezone.now()
    common = {"flavor": a100, "priority_class": standard, "justification": "bench"}
    Allocation.objects.bulk_create([
        Allocation(project=seg, quantity=1, cluster=cluster, state=AllocationState.ACTIVE, requested_by=dave,
                   starts_at=now - datetime.timedelta(hours=1),
                   ends_at=now + datetime.timedelta(minutes=10 + index * 14400 // max(grants, 1)), **common)
        for index in range(grants)])
    Allocation.objects.bulk_create([
        Allocation(project=seg if index % 2 else llm, quantity=1 + index % 4, state=AllocationState.PENDING,
                   requested_by=dave if index % 2 else alice, starts_at=now, ends_at=now + datetime.timedelta(days=1),
                   **common)
        for index in range(pending)])
    refused = Allocation.objects.create(project=llm, quantity=8, requested_by=alice, starts_at=now,
                                        ends_at=now + datetime.timedelta(days=1), **common)
    fits = Allocation.objects.create(project=llm, quantity=1, requested_by=alice, starts_at=now,
                                     ends_at=now + datetime.timedelta(days=1), **common)
    body = {"project": llm.pk, "flavor": a100.pk, "quantity": 8, "priority_class": standard.pk,
            "ends_at": (now + datetime.timedelta(days=1)).isoformat(), "justification": "bench"}
    return {"user": alice, "refused": refused.pk, "fits": fits.pk, "body": body}


def timed(call: Callable[[], Any], calls: int) -> list[float]:
    call()  # warm: the process's first read of the cluster
    out = []
    for _ in range(calls):
        began = time.perf_counter()
        call()
        out.append(1000 * (time.perf_counter() - began))
    return out


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[18] if len(values) >= 2 else values[0]


def measure(scene: dict[str, Any], calls: int) -> dict[str, list[float]]:
    from rest_framework.test import APIClient

    client = APIClient(HTTP_HOST="localhost")
    client.force_authenticate(scene["user"])

    def get(path: str) -> Callable[[], Any]:
        def call() -> None:
            response = client.get(path)
            assert response.status_code == 200, response.content
        return call

    def simulate() -> None:
        response = client.post("/api/v1/allocations/simulate/", scene["body"], format="json")
        assert response.status_code == 200, response.content

    return {
        "baseline GET /me/": timed(get("/api/v1/me/"), calls),
        "why (refused: quota, alternatives, estimate)": timed(get(f"/api/v1/allocations/{scene['refused']}/why/"), calls),
        "why (fits: one decision)": timed(get(f"/api/v1/allocations/{scene['fits']}/why/"), calls),
        "simulate (the refused body)": timed(simulate, calls),
    }


def report(figures: dict[str, list[float]], *, full_size: bool) -> None:
    baseline = p95(figures["baseline GET /me/"])
    for name, values in figures.items():
        ratio = p95(values) / baseline if baseline else float("nan")
        print(f"{name}: p50 {statistics.median(values):.1f} ms, p95 {p95(values):.1f} ms, p95 ratio to the "
              f"baseline {ratio:.1f}")
    for name in ("why (refused: quota, alternatives, estimate)", "simulate (the refused body)"):
        met = p95(figures[name]) <= TARGET_MS
        verdict = ("MET" if met else "NOT MET") if full_size else f"NOT MEASURED at the target's size ({'within' if met else 'over'} 500 ms here)"
        print(f"target {name} p95 <= {TARGET_MS:.0f} ms at {TARGET_PENDING:,} pending and {TARGET_NODES:,} nodes: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pending", type=int, default=TARGET_PENDING)
    parser.add_argument("--nodes", type=int, default=TARGET_NODES)
    parser.add_argument("--grants", type=int, default=200)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--quick", action="store_true", help="a small scene: a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.pending, args.nodes, args.grants, args.calls = 500, 50, 40, 10
    print("command: " + " ".join([Path(sys.executable).name, "bench/why.py", *sys.argv[1:]]))
    owner = os.environ.get("DATABASE_URL", "")
    postgres = owner.startswith("postgres")
    if postgres:
        scratch(owner, create=True)
    try:
        run(args, database=scratch_url(owner) if postgres else "")
    finally:
        if postgres:
            from django.db import connections

            connections.close_all()
            scratch(owner, create=False)


def run(args: argparse.Namespace, *, database: str) -> None:
    with tempfile.TemporaryDirectory() as work:
        setup_django(Path(work), database)
        logging.disable(logging.INFO)  # the access log of every call
        began = time.perf_counter()
        scene = seed(nodes=args.nodes, grants=args.grants, pending=args.pending)
        engine = "PostgreSQL" if database else "SQLite (placement states read afresh each call: use PostgreSQL)"
        print(f"{args.pending:,} pending requests, {args.nodes:,} nodes of 8 A100, {args.grants} running grants "
              f"(seeded in {time.perf_counter() - began:.0f} s); {args.calls} calls each, {engine}, in process")
        report(measure(scene, args.calls), full_size=args.pending >= TARGET_PENDING and args.nodes >= TARGET_NODES)


if __name__ == "__main__":
    main()

"""Benchmark (not a timed test): the utilisation page's reads over a month of 5-minute rows.

    .venv/bin/python bench/utilisation_charts.py [--allocations 100] [--days 30] [--departments 10]
    DATABASE_URL=postgres://... .venv/bin/python bench/utilisation_charts.py

Builds one cluster with ``--allocations`` active whole-GPU grants spread over ``--departments``
departments, booked ``--days`` days ago, and one ``AllocationUsage`` row per allocation per 5-minute
bucket over those days (5 % of them unknown, and for a tenth of the buckets a second row from the
node agent, which the reads must leave out). Then ``telemetry.utilisation_reads.cluster_utilisation``
runs for the day, week and month ranges, as a platform admin (the whole cluster) and as a researcher
of one department; printed: rows, the median of three runs in milliseconds and the queries each
took. On a throw-away SQLite database set up as ``bench/admission.py`` does, or on the PostgreSQL of
``DATABASE_URL`` when given (migrated; the bench's rows are left there).
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

A100 = "NVIDIA-A100-SXM4-80GB"
FIVE = datetime.timedelta(minutes=5)


def setup_django(work: Path) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "gpuportal.settings_test"
    if not os.environ.get("DATABASE_URL"):
        os.environ["DATABASE_URL"] = f"sqlite:///{work / 'bench.sqlite3'}"
    os.environ["GPUPORTAL_VAR_DIR"] = str(work)
    os.environ["GPUPORTAL_MANIFESTS_DIR"] = str(work / "manifests")
    os.environ.pop("CELERY_BROKER_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def seed(args: argparse.Namespace, now: datetime.datetime) -> dict[str, Any]:
    from django.contrib.auth.models import User

    from allocations.models import Allocation, AllocationState, Flavor, PriorityClass, Reservation, SharingMode
    from clusters.models import Cluster, Gpu, Node
    from telemetry.models import AllocationUsage, UsageSource
    from tenants.models import Department, Membership, Project, Role

    rng = random.Random(args.seed)
    tag = f"{time.time_ns():x}"
    root = Department.objects.create(slug=f"bench-{tag}", name="Bench")
    departments = Department.objects.bulk_create(
        [Department(slug=f"bench-{tag}-{n}", name=f"Bench {n}", parent=root) for n in range(args.departments)]
    )
    projects = Project.objects.bulk_create(
        [Project(slug=f"bench-{tag}-{n}", name=f"Project {n}", department=department)
         for n, department in enumerate(departments)]
    )  # fmt: skip
    admin, member = User.objects.create(username=f"admin-{tag}"), User.objects.create(username=f"member-{tag}")
    Membership.objects.create(user=admin, department=root, role=Role.PLATFORM_ADMIN)
    Membership.objects.create(user=member, department=departments[0], role=Role.RESEARCHER)
    flavor = Flavor.objects.create(name=f"a100-{tag}", display_name="A100", gpu_model=A100, sharing_mode=SharingMode.EXCLUSIVE,
                                   resource_name="nvidia.com/gpu", memory_mib=81920, compute_percent=100, gpu_equivalents=1)  # fmt: skip
    standard = PriorityClass.objects.create(name=f"gpu-standard-{tag}", value=1000)
    cluster = Cluster.objects.create(name=f"bench-{tag}")
    nodes = Node.objects.bulk_create([Node(cluster=cluster, name=f"a100-{n}") for n in range(args.allocations // 8 + 1)])
    Gpu.objects.bulk_create([Gpu(node=nodes[n // 8], index=n % 8, model=A100, memory_mib=81920) for n in range(args.allocations)])
    since = now - datetime.timedelta(days=args.days)
    allocations = Allocation.objects.bulk_create([
        Allocation(project=projects[n % len(projects)], flavor=flavor, quantity=1, priority_class=standard, cluster=cluster,
                   starts_at=since, ends_at=now + datetime.timedelta(days=1), justification="bench",
                   state=AllocationState.ACTIVE, requested_by=admin)
        for n in range(args.allocations)
    ])  # fmt: skip
    Reservation.objects.bulk_create([
        Reservation(allocation=allocation, unit=0, node=nodes[n // 8], gpu_indices=[n % 8], gpu_milli=1000)
        for n, allocation in enumerate(allocations)
    ])  # fmt: skip
    Reservation.objects.filter(allocation__in=allocations).update(created_at=since)
    rows = 0
    batch: list[AllocationUsage] = []
    at = since
    while at < now:
        for allocation in allocations:
            known = rng.random() >= 0.05
            activity = rng.random() if known else None
            common = {"allocation": allocation, "cluster": cluster, "department_id": allocation.project.department_id,
                      "bucket_start": at, "devices": 1, "granted_gpu_eq": 1.0}  # fmt: skip
            batch.append(AllocationUsage(**common, source=UsageSource.DCGM, coverage=1.0 if known else 0.2,
                                         activity=activity, used_gpu_eq=activity))  # fmt: skip
            if rng.random() < 0.1:
                batch.append(AllocationUsage(**common, source=UsageSource.AGENT, coverage=1.0, activity=0.5, used_gpu_eq=0.5))
        if len(batch) >= 20000:
            AllocationUsage.objects.bulk_create(batch, batch_size=5000)
            rows += len(batch)
            batch = []
        at += FIVE
    AllocationUsage.objects.bulk_create(batch, batch_size=5000)
    rows += len(batch)
    return {"cluster": cluster, "admin": admin, "member": member, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--allocations", type=int, default=100)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--departments", type=int, default=10)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-utilisation-charts-") as folder:
        setup_django(Path(folder))
        from django.db import connection
        from django.test.utils import CaptureQueriesContext
        from django.utils import timezone

        from telemetry.utilisation_reads import cluster_utilisation
        from tenants.access import access_forget

        now = timezone.now().replace(second=0, microsecond=0)
        now -= datetime.timedelta(minutes=now.minute % 5)
        began = time.perf_counter()
        scene = seed(args, now)
        print(f"{connection.vendor}: {scene['rows']:,} usage rows for {args.allocations} allocations over {args.days} days "
              f"in {args.departments} departments (seeded in {time.perf_counter() - began:.1f} s)")  # noqa: T201
        for persona in ("admin", "member"):
            for range_name in ("day", "week", "month"):
                times, queries = [], 0
                for _ in range(3):
                    access_forget(scene[persona])
                    with CaptureQueriesContext(connection) as captured:
                        start = time.perf_counter()
                        found = cluster_utilisation(user=scene[persona], cluster_id=scene["cluster"].pk,
                                                    range_name=range_name, now=now)  # fmt: skip
                        times.append(1000 * (time.perf_counter() - start))
                    queries = len(captured.captured_queries)
                ratio = found.total.ratio
                print(f"  {persona:6} {range_name:5}: {statistics.median(times):8.1f} ms, {queries} queries, "  # noqa: T201
                      f"{len(found.total.buckets)} buckets, {len(found.departments)} departments, "
                      f"busy {100 * ratio:.1f} % where measured" if ratio is not None else "busy unknown")


if __name__ == "__main__":
    main()

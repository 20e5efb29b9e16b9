"""Accounting benchmark (not a timed test): a month of 500 departments' GPU-hours rolled and closed
into statements, and ``GET /api/v1/usage/`` under load against a trivial GET in the same run.

Starts gunicorn on PostgreSQL (a throw-away database; ``bench/portal_server.py``), seeds the demo
and then, in bulk, ``--departments`` departments with a project and two A100 grants each (booked
on GPUs, holding the whole of last month), a rate card, and the month's ``UsageHour`` rows rolled
from the grants (the roll-up's own path, a day at a time; timed). Then, in the seeding process:
``statements_close`` for the month (timed; target for 500 departments × 31 days: under 5 s); and
over HTTP, ``--clients`` client processes each doing ``GET /api/v1/usage/`` (last month by day,
per department, as a platform admin) and, in the same run, ``GET /api/v1/me/`` as the baseline.
Prints rows, timings, throughput, p50/p99 and the ratios.

    DATABASE_URL=postgres://owner:pw@127.0.0.1:5432/db .venv/bin/python bench/accounting.py --departments 500

Without DATABASE_URL it starts PostgreSQL and Redis with scripts/services.sh and stops them after.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.api_load import describe  # noqa: E402
from bench.portal_server import portal_served  # noqa: E402
from bench.usage_load import run_clients  # noqa: E402

SEED = """
import datetime, json, sys, time
from decimal import Decimal
from django.contrib.auth.models import User
from django.utils import timezone
from tenants.access_tokens import access_token_create
from accounting.models import RateCard, UsageHour
from accounting.rolling import usage_hours_roll
from accounting.statements import statements_close
from allocations.models import Allocation, AllocationState, Flavor, PriorityClass, Reservation
from clusters.models import Cluster, Gpu, Node
from demo.seed import demo_seed
from tenants.models import Department, Project

count = int(sys.argv[1])
demo_seed()
now = timezone.now()
this_month = now.astimezone(datetime.UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
start = (this_month - datetime.timedelta(days=1)).replace(day=1)
period = start.strftime("%Y-%m")
cluster = Cluster.objects.get(name="demo")
flavor = Flavor.objects.get(name="a100-80gb")
priority = PriorityClass.objects.get(name="gpu-standard")
admin = User.objects.get(username="admin")
root = Department.objects.get(slug="acme")
departments = Department.objects.bulk_create(
    [Department(slug=f"bench-{n:04d}", name=f"Bench {n}", parent=root) for n in range(count)]
)
projects = Project.objects.bulk_create(
    [Project(slug=f"bench-{n:04d}-p", name=f"Bench project {n}", department=d) for n, d in enumerate(departments)]
)
nodes = Node.objects.bulk_create([Node(cluster=cluster, name=f"bench-node-{n:04d}") for n in range((2 * count + 7) // 8)])
Gpu.objects.bulk_create([Gpu(node=node, index=i, model="NVIDIA-A100-SXM4-80GB", memory_mib=81920) for node in nodes for i in range(8)])
grants = Allocation.objects.bulk_create([
    Allocation(project=project, flavor=flavor, quantity=1, priority_class=priority, cluster=cluster,
               starts_at=start - datetime.timedelta(days=1), ends_at=this_month + datetime.timedelta(days=30),
               justification="bench", state=AllocationState.ACTIVE, requested_by=admin, decided_by=admin, decided_at=start)
    for project in projects for _ in range(2)
])
Reservation.objects.bulk_create([
    Reservation(allocation=grant, unit=0, node=nodes[index // 8], gpu_indices=[index % 8], gpu_milli=1000)
    for index, grant in enumerate(grants)
])
Reservation.objects.filter(allocation__in=grants).update(created_at=start - datetime.timedelta(days=1))
RateCard.objects.all().delete()
RateCard.objects.create(flavor=flavor, price_per_gpu_hour=Decimal("2.5"), currency="EUR", valid_from=start - datetime.timedelta(days=365))
began = time.perf_counter()
day = start
while day < this_month:
    usage_hours_roll(start=day, end=min(this_month, day + datetime.timedelta(days=1)), now=now)
    day += datetime.timedelta(days=1)
rolled = time.perf_counter() - began
rows = UsageHour.objects.filter(hour__gte=start, hour__lt=this_month).count()
began = time.perf_counter()
closed = statements_close(period=period, now=now)
closing = time.perf_counter() - began
token = access_token_create(actor=admin, name="bench", scope="write").key
print(json.dumps({"period": period, "start": start.isoformat(), "end": this_month.isoformat(), "rows": rows,
                  "rolled": rolled, "closing": closing, "statements": len(closed), "token": token,
                  "grants": len(grants), "department": departments[0].pk}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--departments", type=int, default=500)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per HTTP phase")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
    options = parser.parse_args()
    seed = f"import sys; sys.argv = ['seed', '{options.departments}']\n" + SEED
    with portal_served(prefix="bench_accounting", seed=seed, workers=options.workers, use_broker=False) as portal:
        setup = json.loads(portal.seed_output.strip().splitlines()[-1])
        print(f"{options.departments} departments, {setup['grants']} grants, month {setup['period']}: "
              f"{setup['rows']:,} usage hours")  # fmt: skip
        print(f"roll-up of the month, a day at a time: {setup['rolled']:.2f} s")
        print(f"statements_close: {setup['statements']} statements in {setup['closing']:.2f} s (target < 5 s)")
        month = f"from={setup['start']}&to={setup['end']}".replace("+", "%2B")
        paths = {
            # what a department's page asks: its month by day (31 rows)
            "one department by day": f"/api/v1/usage/?granularity=day&department={setup['department']}&{month}",
            # the platform's overview: every department's month (one row each)
            "all by month": f"/api/v1/usage/?granularity=month&group_by=department&{month}",
        }
        run_clients(portal.port, setup["token"], "/api/v1/me/", 2, 2.0)  # warm up
        print(f"gunicorn {options.workers} workers, {options.clients} clients, {options.duration:.0f} s each")
        baseline = run_clients(portal.port, setup["token"], "/api/v1/me/", options.clients, options.duration)
        base_rate, line = describe("GET /me", baseline.latencies, baseline.elapsed)
        base_p99 = _p99(baseline.latencies)
        print(f"{line}  errors {baseline.errors}")
        for name, path in paths.items():
            phase = run_clients(portal.port, setup["token"], path, options.clients, options.duration)
            rate, line = describe("GET /usage", phase.latencies, phase.elapsed)
            print(f"{line}  errors {phase.errors}  ({name}, {phase.size:,} bytes)")
            print(f"    p99 {_p99(phase.latencies) * 1000:.1f} ms (target < 50 ms), {_p99(phase.latencies) / base_p99:.2f}x the "
                  f"baseline's p99; throughput {rate / base_rate:.2f}x the baseline's")  # fmt: skip
    return 0


def _p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0


if __name__ == "__main__":
    sys.exit(main())

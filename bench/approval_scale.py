"""Benchmark (not a timed test): does an approval slow down with the size of the cluster?

    DATABASE_URL=postgres://OWNER:PW@HOST:PORT/DB .venv/bin/python bench/approval_scale.py \\
        [--sizes 24,2500] [--approvals 300] [--rounds 2] [--fill 0.3] [--seed 7] [--feedback 200] \\
        [--baseline PATH]

For each size it creates a scratch PostgreSQL database next to DB (``<DB>_approval_<size>``,
dropped first and after), migrates it and seeds one cluster of that many nodes of 8 GPUs (A100
nodes with MIG's mixed strategy, H100 nodes whole, every fourth H100 node MPS with 4 replicas),
a ``--fill`` share of its nodes already half booked by running grants (so a fresh read of the
cluster has rows to read), and room in the quota for everything. Then, in a child process per size
and round (the sizes alternate, so both see the same machine), it replays one seeded stream of
requests (whole A100 and H100 GPUs, A100 MIG 1g.10gb and 3g.40gb, H100 MPS quarters; each
released after a drawn lifetime) through the real services and times each approval: quota,
locks, placement, audit, outbox. The first ``--warmup`` approvals of each child are left out: they
include the process's first read of the cluster (the kept placement state, allocations/booking/state.py)
and its first picture of each flavor's units (the warm-up asks for each flavor once, in turn).

Printed: approval p50/p99 per size, the share of approvals refused for lack of room, and the
ratio of the largest size's p50 to the smallest's (the target: at most 2). Then, on the largest
size, the request form's live feedback (``GET /allocations/new/feedback/`` through Django's test
client, in process: the placement dry run counting up to 32 free units, and what approval would
do), each call after an approval or a release moved the cluster: p50 and p99 (the target: p99
under 100 ms), and the placement dry run alone (``placement_preview``, timed after each call, with
the number of the engine's decisions it asked for: work counted, not only timed).
``--baseline PATH``: a checkout of an earlier commit (``git worktree add ../before <commit>``, or
``git archive <commit> | tar -x -C ../before``) whose portal code answers the same
feedback stream on the same database in the same run, its rounds alternating with this
checkout's, so that both see the same machine, its figures beside this checkout's. ``--approvals
0`` leaves the approval rounds out (the feedback alone).
Without DATABASE_URL it starts PostgreSQL and Redis with scripts/services.sh and stops them after.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:  # the models load once a child has set Django up
    from django.contrib.auth.models import User

    from allocations.models import Flavor
    from clusters.models import Cluster, Node
    from tenants.models import Project

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
# flavor → (weight in the stream, quantities drawn)
STREAM: dict[str, tuple[float, tuple[int, ...]]] = {
    "a100": (0.25, (1, 1, 2, 4)),
    "a100-1g": (0.25, (1, 1, 2, 3)),
    "a100-3g": (0.15, (1, 1, 2)),
    "h100": (0.20, (1, 1, 2, 4)),
    "h100-mps": (0.15, (1, 2, 3)),
}


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def django_setup(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "gpuportal.settings_test"
    os.environ.setdefault("GPUPORTAL_LOG_FORMAT", "console")
    os.environ.pop("CELERY_BROKER_URL", None)
    os.environ.pop("GPUPORTAL_APP_DATABASE_URL", None)  # the scratch databases are the owner's
    import django

    django.setup()
    import logging

    logging.disable(logging.WARNING)  # no broker here: the outbox's hand-over warnings are expected


def child_seed(url: str, nodes: int, fill: float, seed_value: int) -> dict[str, Any]:
    django_setup(url)
    import datetime

    from django.core.management import call_command
    from django.utils import timezone

    from allocations.booking.state import placement_version_bump
    from allocations.models import Allocation, AllocationState, PriorityClass, Reservation
    from clusters.models import Cluster, NodeSharing

    began = time.perf_counter()
    call_command("migrate", verbosity=0)
    admin, member, project = _seed_department()
    flavors = _seed_flavors()
    standard = PriorityClass.objects.create(name="standard", value=1000)
    cluster = Cluster.objects.create(name="bench")
    created = _seed_nodes(cluster, nodes)
    # Running grants on a share of the nodes: four whole GPUs each (not on the MPS nodes).
    rng = random.Random(seed_value)
    busy = [node for node in created if node.sharing != NodeSharing.MPS and rng.random() < fill]
    now = timezone.now()
    grants = Allocation.objects.bulk_create([
        Allocation(project=project, flavor=flavors["a100" if node.sharing == NodeSharing.MIG else "h100"], quantity=4,
                   priority_class=standard, requested_by=member, decided_by=admin, decided_at=now,
                   state=AllocationState.ACTIVE, cluster=cluster, starts_at=now, ends_at=now + datetime.timedelta(days=30),
                   justification="background")
        for node in busy
    ])
    version = placement_version_bump(cluster_id=cluster.pk)
    Reservation.objects.bulk_create([
        Reservation(allocation=grant, unit=unit, node=node, gpu_indices=[unit], gpu_milli=1000, cpu_millicores=4000,
                    memory_mib=32768, policy="seed", changed_version=version)
        for grant, node in zip(grants, busy, strict=True) for unit in range(4)
    ])
    return {"nodes": nodes, "busy_nodes": len(busy), "seed_s": round(time.perf_counter() - began, 1)}


def _seed_department() -> tuple[User, User, Project]:
    """The ``bench`` department with its admin, its researcher, their project and a large quota."""
    from django.contrib.auth.models import User

    from allocations.models import Quota
    from tenants.models import Department, Membership, Project, Role

    department = Department.objects.create(slug="bench", name="Bench")
    admin, member = User.objects.create(username="admin"), User.objects.create(username="member")
    Membership.objects.create(user=admin, department=department, role=Role.DEPARTMENT_ADMIN)
    Membership.objects.create(user=member, department=department, role=Role.RESEARCHER)
    project = Project.objects.create(slug="bench-p", name="Bench", department=department)
    project.members.add(member)
    Quota.objects.create(department=department, flavor=None, guaranteed=Decimal(0), limit=Decimal(900_000))
    return admin, member, project


def _seed_flavors() -> dict[str, Flavor]:
    """Whole A100s and H100s, two MIG profiles of the A100 and an MPS share of the H100, by name."""
    from allocations.models import Flavor, SharingMode

    common = {"cpu_millicores_per_unit": 4000, "memory_mib_per_unit": 32768}
    specs = [
        ("a100", A100, SharingMode.EXCLUSIVE, "", None, "1", "nvidia.com/gpu", 81920),
        ("a100-1g", A100, SharingMode.MIG, "1g.10gb", None, "0.1429", "nvidia.com/mig-1g.10gb", 9856),
        ("a100-3g", A100, SharingMode.MIG, "3g.40gb", None, "0.4286", "nvidia.com/mig-3g.40gb", 40192),
        ("h100", H100, SharingMode.EXCLUSIVE, "", None, "1", "nvidia.com/gpu", 81920),
        ("h100-mps", H100, SharingMode.MPS, "", 4, "0.25", "nvidia.com/gpu.shared", 16384),
    ]
    flavors = {}
    for name, model, mode, profile, replicas, equivalents, resource, memory in specs:
        flavors[name] = Flavor.objects.create(
            name=name, display_name=name, gpu_model=model, sharing_mode=mode, mig_profile=profile, replicas=replicas,
            resource_name=resource, memory_mib=memory, compute_percent=100 if mode == SharingMode.EXCLUSIVE else 25,
            gpu_equivalents=Decimal(equivalents), **common,
        )
    return flavors


def _seed_nodes(cluster: Cluster, nodes: int) -> list[Node]:
    """``nodes`` nodes of eight GPUs: A100s in MIG mode on every other one, H100s on the rest (every
    fourth node shared through MPS)."""
    from clusters.models import Gpu, Node, NodeSharing

    rows = []
    for index in range(nodes):
        a100 = index % 2 == 0
        sharing = NodeSharing.MIG if a100 else (NodeSharing.MPS if index % 4 == 3 else NodeSharing.EXCLUSIVE)
        rows.append(Node(cluster=cluster, name=f"node-{index:04d}", cpu_millicores=128000, memory_mib=1048576,
                         sharing=sharing, sharing_replicas=4 if sharing == NodeSharing.MPS else None))
    created = Node.objects.bulk_create(rows)
    Gpu.objects.bulk_create([
        Gpu(node=node, index=i, model=A100 if node.sharing == NodeSharing.MIG else H100, memory_mib=81920,
            mig_capable=node.sharing == NodeSharing.MIG)
        for node in created for i in range(8)
    ])
    return created


@dataclass
class Stream:
    """What a child replays the stream with: the seeded people, project, class and flavors."""

    admin: Any
    member: Any
    project: Any
    priority: Any
    flavors: dict[str, Any]

    def request(self, name: str, quantity: int) -> Any:
        """A pending request of ``quantity`` units of flavor ``name``, starting now, for a week."""
        import datetime

        from django.utils import timezone

        from allocations.grants import services

        now = timezone.now()
        return services.allocation_request(
            actor=self.member, project=self.project, flavor=self.flavors[name], quantity=quantity,
            priority_class=self.priority, starts_at=now, ends_at=now + datetime.timedelta(days=7), justification="bench",
        )


def stream_open(url: str) -> Stream:
    """Set a child up: Django on ``url``, pushes left queued in the outbox (no broker runs them here:
    the approval is measured, not the delivery to the cluster), the engine's tables built."""
    django_setup(url)
    from django.contrib.auth.models import User

    from allocations.booking import reservations
    from allocations.models import Flavor, PriorityClass
    from clusters import outbox
    from tenants.models import Project

    vars(outbox)["push_dispatch"] = lambda **kwargs: False
    reservations.placement_engine_warm()
    return Stream(admin=User.objects.get(username="admin"), member=User.objects.get(username="member"),
                  project=Project.objects.get(slug="bench-p"), priority=PriorityClass.objects.get(name="standard"),
                  flavors={flavor.name: flavor for flavor in Flavor.objects.all()})


def child_run(url: str, approvals: int, seed_value: int, lifetime: float, warmup: int) -> dict[str, Any]:
    stream = stream_open(url)
    from allocations.grants import services
    from kernel.errors import CapacityExceeded

    rng = random.Random(seed_value)
    names = list(STREAM)
    weights = [STREAM[name][0] for name in names]
    due: dict[int, list[int]] = {}
    latencies: list[float] = []
    refused = 0
    for step in range(approvals + warmup):
        for grant in due.pop(step, []):
            services.allocation_release(actor=stream.admin, allocation_id=grant)
        name = names[step] if step < min(warmup, len(names)) else rng.choices(names, weights)[0]
        allocation = stream.request(name, rng.choice(STREAM[name][1]))
        began = time.perf_counter()
        try:
            services.allocation_approve(actor=stream.admin, allocation_id=allocation.pk)
            due.setdefault(step + 1 + int(rng.expovariate(1 / lifetime)), []).append(allocation.pk)
        except CapacityExceeded:
            refused += step >= warmup
        if step >= warmup:
            latencies.append(time.perf_counter() - began)
    return {"latencies": latencies, "refused": refused}


def child_feedback(url: str, calls: int, seed_value: int, warmup: int, code: str = "") -> dict[str, Any]:
    """The request form's live feedback (GET /allocations/new/feedback/, the placement dry run on
    the cluster and what approval would do), as a researcher's browser asks for it, timed in
    process; between calls an approval or a release moves the cluster, so each call first brings
    the kept state forward. ``code``: the checkout whose portal answers (this one by default)."""
    if code:
        sys.path.insert(0, code)
    stream = stream_open(url)
    from django.test import Client

    from allocations.booking import attempts
    from allocations.booking.preview import placement_preview
    from allocations.grants import services
    from kernel.errors import ApplicationError

    decisions = [0]  # the engine's decisions (placing.place) the dry runs ask for
    place = vars(attempts)["place"]

    def counted_place(*args: Any, **kwargs: Any) -> Any:
        decisions[0] += 1
        return place(*args, **kwargs)

    vars(attempts)["place"] = counted_place
    browser = Client(HTTP_HOST="localhost")
    browser.force_login(stream.member)
    rng = random.Random(seed_value)
    names = list(STREAM)
    weights = [STREAM[name][0] for name in names]
    granted: list[int] = []
    out: dict[str, list[Any]] = {"latencies": [], "dry_runs": [], "decisions": []}
    for step in range(calls + warmup):
        if granted and rng.random() < 0.4:
            services.allocation_release(actor=stream.admin, allocation_id=granted.pop(rng.randrange(len(granted))))
        else:
            allocation = stream.request(rng.choices(names, weights)[0], 1)
            try:
                granted.append(services.allocation_approve(actor=stream.admin, allocation_id=allocation.pk).pk)
            except ApplicationError:
                pass
        name = names[step] if step < min(warmup, len(names)) else rng.choices(names, weights)[0]
        params = {"project": stream.project.pk, "flavor": stream.flavors[name].pk, "quantity": rng.choice(STREAM[name][1]),
                  "priority_class": stream.priority.pk, "duration_days": 7}
        began = time.perf_counter()
        response = browser.get("/allocations/new/feedback/", params, HTTP_HX_REQUEST="true")
        elapsed = time.perf_counter() - began
        if response.status_code != 200:
            raise SystemExit(f"feedback answered {response.status_code}")
        # The dry run alone, on the kept state the call brought forward.
        began, asked = time.perf_counter(), decisions[0]
        placement_preview(flavor=stream.flavors[name], quantity=params["quantity"], project=stream.project)
        if step >= warmup:
            for key, value in (("latencies", elapsed), ("dry_runs", time.perf_counter() - began),
                               ("decisions", decisions[0] - asked)):
                out[key].append(value)
    return out


def run_child(name: str, *arguments: Any, cwd: Path = ROOT) -> dict[str, Any]:
    result = subprocess.run([sys.executable, __file__, "--child", name, json.dumps(arguments)],
                            capture_output=True, text=True, cwd=cwd, check=False)
    if result.returncode != 0:
        raise SystemExit(f"step {name} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    figures: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="24,2500", help="node counts, comma-separated (smallest first)")
    parser.add_argument("--approvals", type=int, default=300, help="approvals timed per size and round")
    parser.add_argument("--warmup", type=int, default=5, help="approvals left out at the start of each child")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--fill", type=float, default=0.3, help="share of nodes half booked before the stream")
    parser.add_argument("--lifetime", type=float, default=60.0, help="mean approvals a grant lives")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--feedback", type=int, default=200,
                        help="feedback calls timed on the largest size per round (0: none)")
    parser.add_argument("--baseline", help="a checkout of an earlier commit: its feedback measured in the same run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("arguments", nargs="?", help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    if args.child:
        steps: dict[str, Callable[..., dict[str, Any]]] = {"seed": child_seed, "run": child_run,
                                                            "feedback": child_feedback}
        print(json.dumps(steps[args.child](*json.loads(args.arguments))))
        return
    import psycopg

    stop_services = False
    owner = os.environ.get("DATABASE_URL", "")
    if not owner.startswith("postgres"):
        from bench.portal_server import services_up

        os.environ.update(services_up())
        owner, stop_services = os.environ["DATABASE_URL"], True
    base = urlsplit(owner).path.lstrip("/") or "gpuportal"
    sizes = [int(size) for size in args.sizes.split(",")]
    names = {size: f"{base}_approval_{size}" for size in sizes}
    try:
        with psycopg.connect(owner, autocommit=True) as connection:
            for name in names.values():
                connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                connection.execute(f'CREATE DATABASE "{name}"')
        _measure(args, owner, sizes, names)
    finally:
        with psycopg.connect(owner, autocommit=True) as connection:
            for name in names.values():
                connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if stop_services:
            subprocess.run([str(ROOT / "scripts/services.sh"), "down"], check=False)


def _measure(args: argparse.Namespace, owner: str, sizes: list[int], names: dict[int, str]) -> None:
    """Seed each size's database, time the approval rounds and the feedback, and print the figures."""
    for size in sizes:
        print(f"seeded {json.dumps(run_child('seed', with_database(owner, names[size]), size, args.fill, args.seed))}",
              flush=True)
    if args.approvals:
        _approvals(args, owner, sizes, names)
    if args.feedback:
        _feedback(args, with_database(owner, names[sizes[-1]]), sizes[-1])


def _approvals(args: argparse.Namespace, owner: str, sizes: list[int], names: dict[int, str]) -> None:
    """The approval rounds, the sizes alternating, and their figures."""
    results: dict[int, list[float]] = {size: [] for size in sizes}
    refused: dict[int, int] = dict.fromkeys(sizes, 0)
    for round_number in range(args.rounds):
        for size in sizes:
            figures = run_child("run", with_database(owner, names[size]), args.approvals, args.seed + round_number,
                                args.lifetime, args.warmup)
            results[size] += figures["latencies"]
            refused[size] += figures["refused"]
            print(f"round {round_number + 1}, {size} nodes: p50 {percentile(figures['latencies'], 0.5):.1f} ms",
                  flush=True)
    print(f"approvals through the services on PostgreSQL, {args.approvals} per size and round, {args.rounds} rounds, "
          f"{args.fill:.0%} of nodes half booked before the stream")
    for size in sizes:
        values = results[size]
        print(f"  {size:>5} nodes ({size * 8} GPUs): p50 {percentile(values, 0.5):7.1f} ms  "
              f"p99 {percentile(values, 0.99):7.1f} ms  mean {1000 * statistics.fmean(values):7.1f} ms  "
              f"refused for room {refused[size] / len(values):.1%}")
    small, large = sizes[0], sizes[-1]
    ratio = percentile(results[large], 0.5) / percentile(results[small], 0.5)
    print(f"ratio p50 {large} / {small} nodes: {ratio:.2f} (target <= 2: {'met' if ratio <= 2 else 'NOT met'})")


def _feedback(args: argparse.Namespace, url: str, size: int) -> None:
    """The feedback rounds on the largest size: this checkout's, and the baseline's beside it (the
    same stream per round, the order flipped each round), then their figures."""
    codes = {"this checkout": ROOT} | ({"baseline": Path(args.baseline).resolve()} if args.baseline else {})
    seen: dict[str, dict[str, list[Any]]] = {label: {"latencies": [], "dry_runs": [], "decisions": []}
                                             for label in codes}
    for round_number in range(args.rounds):
        for label in list(codes) if round_number % 2 == 0 else list(reversed(codes)):
            figures = run_child("feedback", url, args.feedback, args.seed + round_number, args.warmup,
                                str(codes[label]), cwd=codes[label])
            for key, values in seen[label].items():
                values += figures[key]
            print(f"feedback round {round_number + 1}, {label}: p99 {percentile(figures['latencies'], 0.99):.1f} ms",
                  flush=True)
    from bench.feedback_report import feedback_report

    print(f"request form feedback (GET /allocations/new/feedback/, in process) on {size} nodes, "
          f"{args.feedback} calls per round, {args.rounds} rounds:")
    feedback_report(seen)


if __name__ == "__main__":
    main()

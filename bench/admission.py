"""Benchmark (not a timed test): approvals that book GPUs through the placement engine.

    .venv/bin/python bench/admission.py [--nodes 24] [--requests 600] [--seed 42] [--lifetime 150]
    .venv/bin/python bench/admission.py --contested [--nodes 2500] [--requests 600] [--quota 32] [--burst 20]

Replays one seeded stream of requests (whole A100 and H100 GPUs, A100 MIG 1g.10gb and 3g.40gb
slices, H100 MPS quarters) against a throw-away SQLite database through the real services:
request, approve (quota, locks, placement, audit, outbox), and release when its lifetime is over
(drawn per request, exponential with mean ``--lifetime`` requests), so the cluster churns and
fragments. Every draw is made per request whatever happens to it, so both runs see the very
same stream and differ only in where units go. The stream runs twice, each time in a fresh child process and database: with our
default policy and with FirstFit as the baseline. Printed per run: requests granted and refused
for lack of room, mean GPU allocation over the second half of the stream (booked GPU capacity,
a MIG instance counting its compute slices / 7), approval latency p50/p99, and the share of the
approval spent placing. The ratios compare the two runs of the same stream.

``--contested`` runs one contested stream instead, in one process, on 2,500 nodes unless told
otherwise: two departments under one organisation, each guaranteed half of its ``--quota``
GPU-equivalents and allowed all of it, request in bursts (``--burst`` requests in a row on
average), so each borrows what the other leaves idle during its burst and takes it back in its next
one while within its guarantee. Every grant reclaims without notice, so a reclaiming approval
frees its victims in its own transaction. Printed: approval p50/p99 of the ordinary approvals and
of those that reclaim, the time spent deciding (``admission_decide``) in each, and their ratios
(the budget: a reclaim at most 2x an ordinary approval).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the models load once the bench has set Django up
    from django.contrib.auth.models import User

    from allocations.models import Allocation, Flavor, PriorityClass
    from tenants.models import Project

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
# flavor name → (weight in the stream, quantities to draw from)
STREAM: dict[str, tuple[float, tuple[int, ...]]] = {
    "a100": (0.25, (1, 1, 1, 2, 2, 4, 8)),
    "a100-1g": (0.25, (1, 1, 2, 3, 4, 7)),
    "a100-3g": (0.15, (1, 1, 2)),
    "h100": (0.20, (1, 1, 2, 4, 8)),
    "h100-mps": (0.15, (1, 2, 3, 4, 6)),
}


def setup_django(work: Path) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "gpuportal.settings_test"
    os.environ["DATABASE_URL"] = f"sqlite:///{work / 'bench.sqlite3'}"
    os.environ["GPUPORTAL_VAR_DIR"] = str(work)
    os.environ["GPUPORTAL_MANIFESTS_DIR"] = str(work / "manifests")
    os.environ.pop("CELERY_BROKER_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def seed(nodes: int) -> dict[str, Any]:
    from django.contrib.auth.models import User

    from allocations.models import Quota
    from tenants.models import Department, Membership, Project, Role

    department = Department.objects.create(slug="bench", name="Bench")
    admin, member = User.objects.create(username="admin"), User.objects.create(username="member")
    Membership.objects.create(user=admin, department=department, role=Role.DEPARTMENT_ADMIN)
    Membership.objects.create(user=member, department=department, role=Role.RESEARCHER)
    project = Project.objects.create(slug="bench-p", name="Bench", department=department)
    project.members.add(member)
    Quota.objects.create(department=department, flavor=None, guaranteed=Decimal(0), limit=Decimal(100000))
    return seed_cluster(nodes)


def seed_cluster(nodes: int) -> dict[str, Any]:
    """The flavors, the ``standard`` priority class and one cluster of ``nodes`` nodes of 8 GPUs."""
    from allocations.models import Flavor, PriorityClass, SharingMode
    from clusters.inventory import GpuSpec, node_upsert
    from clusters.models import Cluster, Node, NodeSharing

    common = {"cpu_millicores_per_unit": 4000, "memory_mib_per_unit": 32768}
    specs = [
        ("a100", A100, SharingMode.EXCLUSIVE, "", None, "1", "nvidia.com/gpu"),
        ("a100-1g", A100, SharingMode.MIG, "1g.10gb", None, "0.1429", "nvidia.com/mig-1g.10gb"),
        ("a100-3g", A100, SharingMode.MIG, "3g.40gb", None, "0.4286", "nvidia.com/mig-3g.40gb"),
        ("h100", H100, SharingMode.EXCLUSIVE, "", None, "1", "nvidia.com/gpu"),
        ("h100-mps", H100, SharingMode.MPS, "", 4, "0.25", "nvidia.com/gpu.shared"),
    ]
    for name, model, mode, profile, replicas, equivalents, resource in specs:
        Flavor.objects.create(
            name=name, display_name=name, gpu_model=model, sharing_mode=mode, mig_profile=profile, replicas=replicas,
            resource_name=resource, memory_mib=81920, compute_percent=100 if mode == SharingMode.EXCLUSIVE else 25,
            gpu_equivalents=Decimal(equivalents), **common,
        )
    PriorityClass.objects.create(name="standard", value=1000)
    cluster = Cluster.objects.create(name="bench")
    for index in range(nodes):
        model = A100 if index % 2 == 0 else H100
        name = f"node-{index:03d}"
        node_upsert(actor=None, cluster=cluster, name=name, cpu_millicores=128000, memory_mib=1048576,
                    gpus=[GpuSpec(index=i, model=model, memory_mib=81920, mig_capable=model == A100) for i in range(8)])
        if model == A100:
            Node.objects.filter(name=name).update(sharing=NodeSharing.MIG)
        elif index % 4 == 3:
            Node.objects.filter(name=name).update(sharing=NodeSharing.MPS, sharing_replicas=4)
    return {"gpus": nodes * 8}


def booked_milli() -> int:
    from allocations.booking.defrag import reservation_used_milli
    from allocations.catalogue.selectors import live_reservations_on

    total = 0
    for row in live_reservations_on().select_related("allocation__flavor"):
        total += reservation_used_milli(row, model=row.allocation.flavor.gpu_model, memory_mib=81920) * len(row.gpu_indices)
    return total


def run_stream(*, policy: str, nodes: int, requests: int, seed_value: int, lifetime: float) -> dict[str, Any]:
    from django.contrib.auth.models import User

    from allocations.grants import services
    from allocations.models import Flavor, PriorityClass
    from kernel.errors import CapacityExceeded
    from tenants.models import Project

    facts = seed(nodes)
    placing = _timed_placing(policy)
    admin, member = User.objects.get(username="admin"), User.objects.get(username="member")
    project, priority = Project.objects.get(slug="bench-p"), PriorityClass.objects.get(name="standard")
    flavors = {flavor.name: flavor for flavor in Flavor.objects.all()}
    rng = random.Random(seed_value)
    names = list(STREAM)
    weights = [STREAM[name][0] for name in names]
    due: dict[int, list[int]] = {}  # step → allocations granted whose lifetime ends then
    latencies: list[float] = []
    refused_by: dict[str, int] = {}
    samples: list[float] = []
    for step in range(requests):
        for victim in due.pop(step, []):
            services.allocation_release(actor=admin, allocation_id=victim)
        name = rng.choices(names, weights)[0]
        quantity = rng.choice(STREAM[name][1])
        ends = step + 1 + int(rng.expovariate(1 / lifetime))
        allocation = _request_for_a_week(actor=member, project=project, flavor=flavors[name], quantity=quantity,
                                         priority_class=priority)
        began = time.perf_counter()
        try:
            services.allocation_approve(actor=admin, allocation_id=allocation.pk)
            due.setdefault(ends, []).append(allocation.pk)
        except CapacityExceeded:
            refused_by[name] = refused_by.get(name, 0) + 1
        latencies.append(time.perf_counter() - began)
        if step >= requests // 2:
            samples.append(booked_milli() / (facts["gpus"] * 1000))
    refused = sum(refused_by.values())
    ordered = sorted(latencies)
    return {
        "policy": policy,
        "granted": requests - refused,
        "refused": refused,
        "refused_by_flavor": dict(sorted(refused_by.items())),
        "mean_allocation_pct": round(100 * statistics.fmean(samples), 2),
        "approve_p50_ms": round(1000 * ordered[len(ordered) // 2], 1),
        "approve_p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1),
        "placing_share": round(placing[0] / sum(latencies), 3),
    }


def _request_for_a_week(
    *, actor: User, project: Project, flavor: Flavor, quantity: int, priority_class: PriorityClass
) -> Allocation:
    """A request from now for seven days, through the real service."""
    import datetime

    from django.utils import timezone

    from allocations.grants import services

    now = timezone.now()
    return services.allocation_request(
        actor=actor, project=project, flavor=flavor, quantity=quantity, priority_class=priority_class,
        starts_at=now, ends_at=now + datetime.timedelta(days=7), justification="bench",
    )


def _timed_placing(policy: str) -> list[float]:
    """Keep pushes in the outbox, make ``policy`` the one every booking chooses with, and time each
    placement attempt an approval makes: the seconds add up in the one item returned."""
    from allocations.admission import room
    from allocations.booking import attempts
    from allocations.booking import policy as booking_policy
    from clusters import outbox
    from placement import Policy, Workload, make_policy

    # Pushes stay queued in the outbox: the approval itself is measured, not manifest delivery.
    outbox.push_dispatch = lambda **kwargs: False
    if policy != "ours":
        # Every booking chooses through ``placement_policy_for``, which reads the module's
        # ``default_policy`` when it is called: the baseline replaces it there.
        def baseline(workload: Workload | None = None) -> Policy:
            return make_policy(policy, workload)

        booking_policy.default_policy = baseline  # type: ignore[attr-defined]
    placing = [0.0]
    real_attempt = attempts.placement_attempt  # what an approval places with, through its capacity room

    def timed_attempt(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return real_attempt(*args, **kwargs)
        finally:
            placing[0] += time.perf_counter() - began

    room.placement_attempt = timed_attempt  # type: ignore[attr-defined]
    return placing


def seed_contested(*, nodes: int, quota: int) -> None:
    """``org`` (limit ``quota``) over ``alpha`` and ``beta``, each guaranteed half of it and limited
    to all of it; one project, researcher and admin each; the standard class reclaims without notice,
    so a reclaiming request is approved at once (its victims freed in the same transaction)."""
    from django.contrib.auth.models import User

    from allocations.models import PriorityClass, Quota
    from tenants.models import Department, Membership, Project, Role

    seed_cluster(nodes)
    PriorityClass.objects.filter(name="standard").update(notice_minutes=0)
    org = Department.objects.create(slug="org", name="Org")
    Quota.objects.create(department=org, flavor=None, guaranteed=Decimal(0), limit=Decimal(quota))
    for slug in ("alpha", "beta"):
        department = Department.objects.create(slug=slug, name=slug, parent=org)
        Quota.objects.create(department=department, flavor=None, guaranteed=Decimal(quota) / 2, limit=Decimal(quota))
        admin, member = User.objects.create(username=f"{slug}-admin"), User.objects.create(username=f"{slug}-member")
        Membership.objects.create(user=admin, department=department, role=Role.DEPARTMENT_ADMIN)
        Membership.objects.create(user=member, department=department, role=Role.RESEARCHER)
        Project.objects.create(slug=f"{slug}-p", name=slug, department=department).members.add(member)


def percentiles(values: list[float]) -> tuple[float, float]:
    """p50 and p99 in milliseconds (0 when there is none)."""
    if not values:
        return 0.0, 0.0
    ordered = sorted(values)
    return (round(1000 * ordered[len(ordered) // 2], 2),
            round(1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2))


def run_contested(*, nodes: int, requests: int, seed_value: int, lifetime: float, quota: int,
                  burst: float) -> dict[str, Any]:
    """The contested stream: each request from ``alpha`` or ``beta`` (in bursts, so one borrows while
    the other is quiet), approved through the real services; each approval is timed, and so is the
    decision inside it, and sorted by whether it reclaimed, was ordinary or was refused."""
    from django.contrib.auth.models import User

    from allocations.catalogue.states import HOLDING_STATES
    from allocations.grants import services
    from allocations.models import Allocation, Flavor, PriorityClass
    from kernel.errors import CapacityExceeded, QuotaExceeded
    from tenants.models import Project

    began_seed = time.perf_counter()
    seed_contested(nodes=nodes, quota=quota)
    seeded_s = time.perf_counter() - began_seed
    deciding = _timed_decisions()
    people = {slug: (User.objects.get(username=f"{slug}-member"), User.objects.get(username=f"{slug}-admin"),
                     Project.objects.get(slug=f"{slug}-p")) for slug in ("alpha", "beta")}
    priority = PriorityClass.objects.get(name="standard")
    flavors = {flavor.name: flavor for flavor in Flavor.objects.all()}
    rng = random.Random(seed_value)
    names = list(STREAM)
    weights = [STREAM[name][0] for name in names]
    due: dict[int, list[tuple[str, int]]] = {}
    times: dict[str, list[float]] = {"ordinary": [], "reclaim": [], "refused": []}
    decide: dict[str, list[float]] = {"ordinary": [], "reclaim": [], "refused": []}
    victims = 0
    current = "alpha"
    for step in range(requests):
        for slug, grant in due.pop(step, []):
            if Allocation.objects.filter(pk=grant, state__in=HOLDING_STATES).exists():  # not reclaimed meanwhile
                services.allocation_release(actor=people[slug][1], allocation_id=grant)
        if rng.random() < 1 / burst:  # bursts: the same department asks several times in a row
            current = "beta" if current == "alpha" else "alpha"
        name = rng.choices(names, weights)[0]
        quantity = rng.choice(STREAM[name][1])
        ends = step + 1 + int(rng.expovariate(1 / lifetime))
        member, admin, project = people[current]
        allocation = _request_for_a_week(actor=member, project=project, flavor=flavors[name], quantity=quantity,
                                         priority_class=priority)
        deciding[0] = 0.0
        began = time.perf_counter()
        try:
            services.allocation_approve(actor=admin, allocation_id=allocation.pk)
            taken = Allocation.objects.filter(reclaimed_for_id=allocation.pk).count()
            kind = "reclaim" if taken else "ordinary"
            victims += taken
            due.setdefault(ends, []).append((current, allocation.pk))
        except (QuotaExceeded, CapacityExceeded):
            kind = "refused"
        elapsed = time.perf_counter() - began
        times[kind].append(elapsed)
        decide[kind].append(deciding[0])
    return {"nodes": nodes, "requests": requests, "quota": quota, "seed_s": round(seeded_s, 1), "victims": victims,
            **_by_kind(times, decide)}


def _by_kind(times: dict[str, list[float]], decide: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Per kind of approval: how many, and the p50 and p99 of the approvals and of their decisions."""
    result: dict[str, dict[str, float]] = {}
    for kind in times:
        p50, p99 = percentiles(times[kind])
        d50, d99 = percentiles(decide[kind])
        result[kind] = {"count": len(times[kind]), "approve_p50_ms": p50, "approve_p99_ms": p99,
                        "decide_p50_ms": d50, "decide_p99_ms": d99}
    return result


def _timed_decisions() -> list[float]:
    """Keep pushes in the outbox (the approval is measured, not delivery) and time the admission
    decision each approval makes: its seconds add up in the one item returned (reset it per request)."""
    from allocations.grants import services
    from clusters import outbox

    vars(outbox)["push_dispatch"] = lambda **kwargs: False
    deciding = [0.0]
    real_decide = vars(services)["admission_decide"]

    def timed_decide(**kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return real_decide(**kwargs)
        finally:
            deciding[0] += time.perf_counter() - began

    vars(services)["admission_decide"] = timed_decide  # what approval calls, timed
    return deciding


def contested_main(args: argparse.Namespace) -> None:
    command = [sys.executable, __file__, "--child", "contested", "--nodes", str(args.nodes), "--requests",
               str(args.requests), "--seed", str(args.seed), "--lifetime", str(args.lifetime), "--quota", str(args.quota),
               "--burst", str(args.burst)]
    result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
    print(json.dumps(result))
    ordinary, reclaim = result["ordinary"], result["reclaim"]
    print(f"contested stream: {args.nodes} nodes ({args.nodes * 8} GPUs), {args.requests} requests, seed {args.seed}, "
          f"quota {args.quota} GPU-equivalents (alpha and beta guaranteed half each), mean lifetime {args.lifetime:g}")
    print(f"approvals: {ordinary['count']} ordinary, {reclaim['count']} reclaiming ({result['victims']} victims), "
          f"{result['refused']['count']} refused")
    for label, key in (("approval", "approve"), ("decision", "decide")):
        low, high = ordinary[f"{key}_p50_ms"], ordinary[f"{key}_p99_ms"]
        print(f"{label} p50/p99: ordinary {low}/{high} ms, reclaiming {reclaim[f'{key}_p50_ms']}/"
              f"{reclaim[f'{key}_p99_ms']} ms (ratio p50 {reclaim[f'{key}_p50_ms'] / max(low, 0.001):.2f}, "
              f"p99 {reclaim[f'{key}_p99_ms'] / max(high, 0.001):.2f}; budget 2.00)")


def child(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as work:
        setup_django(Path(work))
        if args.child == "contested":
            result = run_contested(nodes=args.nodes, requests=args.requests, seed_value=args.seed,
                                   lifetime=args.lifetime, quota=args.quota, burst=args.burst)
        else:
            result = run_stream(policy=args.child, nodes=args.nodes, requests=args.requests, seed_value=args.seed,
                                lifetime=args.lifetime)
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, help="24 (2,500 with --contested)")
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--lifetime", type=float, default=150.0, help="mean lifetime of a grant, in requests")
    parser.add_argument("--contested", action="store_true", help="two departments borrowing from each other")
    parser.add_argument("--quota", type=int, default=32, help="--contested: the organisation's GPU-equivalents")
    parser.add_argument("--burst", type=float, default=20.0, help="--contested: mean requests in a row from one department")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.nodes is None:
        args.nodes = 2500 if args.contested else 24
    if args.child:
        child(args)
        return
    if args.contested:
        contested_main(args)
        return
    results = {}
    for policy in ("ours", "firstfit"):
        command = [sys.executable, __file__, "--child", policy, "--nodes", str(args.nodes), "--requests",
                   str(args.requests), "--seed", str(args.seed), "--lifetime", str(args.lifetime)]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results[policy] = json.loads(output.strip().splitlines()[-1])
        print(json.dumps(results[policy]))
    ours, baseline = results["ours"], results["firstfit"]
    print(f"{args.nodes} nodes ({args.nodes * 8} GPUs), {args.requests} requests, seed {args.seed}, "
          f"mean lifetime {args.lifetime:g} requests")
    print(f"granted: ours {ours['granted']}, FirstFit {baseline['granted']} "
          f"(ratio {ours['granted'] / max(baseline['granted'], 1):.3f})")
    print(f"mean GPU allocation, 2nd half: ours {ours['mean_allocation_pct']} %, FirstFit "
          f"{baseline['mean_allocation_pct']} %")
    print(f"approve p50/p99: ours {ours['approve_p50_ms']}/{ours['approve_p99_ms']} ms, FirstFit "
          f"{baseline['approve_p50_ms']}/{baseline['approve_p99_ms']} ms "
          f"(p50 ratio {ours['approve_p50_ms'] / max(baseline['approve_p50_ms'], 0.001):.2f}); "
          f"share of approval spent placing: ours {ours['placing_share']}, FirstFit {baseline['placing_share']}")


if __name__ == "__main__":
    main()

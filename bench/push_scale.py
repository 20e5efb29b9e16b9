"""Benchmark (not a timed test): what an approval's push costs the worker, and how long it takes
to reach the cluster, on a small and a large cluster.

    DATABASE_URL=postgres://OWNER:PW@HOST:PORT/DB .venv/bin/python bench/push_scale.py \\
        [--sizes 24,2500] [--approvals 100] [--rate 20] [--seconds 30] [--baseline PATH]

For each size it seeds a scratch PostgreSQL database as ``bench/approval_scale.py`` does (one
cluster of that many nodes of 8 GPUs: A100 MIG nodes, whole H100s, MPS H100s; 30 % of nodes half
booked), pushed through the manifests driver into a scratch folder (what a GitOps repository
receives; the Kubernetes driver's requests are counted by ``tests/clusters/test_kube_changed_only_push.py``).

1. **Worker CPU per approval's push**: a child replays ``--approvals`` approvals of
   ``bench/approval_scale.py``'s stream, and after each one delivers the pushes it queued (its
   project's and the cluster-wide objects') as a worker does (``delivery.outbox.push_deliver``),
   measuring the process CPU of that delivery. After a first full push, left out.
2. **Push lag** (``gpuportal_push_lag_seconds``' definition: from the outbox row written with the
   approval to the push that carried it succeeding): one worker process delivers pushes as they
   come (``pushes_due``, then ``push_deliver`` each) while another approves at ``--rate`` per second
   for ``--seconds``; then p50/p99 of every push row of the run, and the worker's CPU per approval.
   Printed with MET / NOT MET against the target p99 <= 5 s at 20 approvals/s.

``--baseline PATH``: a checkout of an earlier commit (``git worktree add ../before <commit>``);
the children then also run that checkout's portal code on the same databases, in the same run, and
the ratios are printed. Without it only this checkout is measured.
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
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
LAG_TARGET_S = 5.0
RATE_TARGET = 20.0


def _code(code: str) -> None:
    """Run the portal code of ``code`` (a checkout), with this file's bench helpers."""
    sys.path.insert(0, code)
    if str(Path.cwd().resolve()) != str(Path(code).resolve()):
        raise SystemExit(f"run this step from {code}: Celery puts the working directory first on the import path")


def _stream(url: str, manifests: str) -> Any:
    from bench import approval_scale

    os.environ["GPUPORTAL_MANIFESTS_DIR"] = manifests
    stream = approval_scale.stream_open(url)
    from django.conf import settings

    import delivery

    if not str(delivery.__file__).startswith(str(Path.cwd().resolve())):
        raise SystemExit(f"the portal code came from {delivery.__file__}, not {Path.cwd()}")

    settings.GPUPORTAL_MANIFESTS_DIR = Path(manifests)
    return stream


def _deliver_due() -> int:
    from clusters.outbox import pushes_due
    from delivery.outbox import push_deliver

    due = pushes_due()
    for push_id in due:
        push_deliver(push_id=push_id, ignore_schedule=True)
    return len(due)


def _full_push() -> None:
    """The first push of everything (left out of the figures), as ``cluster_sync`` would."""
    from clusters.models import Cluster
    from delivery.services import cluster_sync

    cluster_sync(cluster_id=Cluster.objects.get(name="bench").pk)


def child_cpu(code: str, url: str, approvals: int, seed_value: int, manifests: str) -> dict[str, Any]:
    _code(code)
    from bench.approval_scale import STREAM

    stream = _stream(url, manifests)
    from allocations.grants import services
    from kernel.errors import CapacityExceeded

    _full_push()
    rng = random.Random(seed_value)
    names, weights = list(STREAM), [STREAM[name][0] for name in STREAM]
    granted: list[int] = []
    cpu: list[float] = []
    for _ in range(approvals):
        if granted and rng.random() < 0.3:
            services.allocation_release(actor=stream.admin, allocation_id=granted.pop(rng.randrange(len(granted))))
            _deliver_due()
        name = rng.choices(names, weights)[0]
        allocation = stream.request(name, rng.choice(STREAM[name][1]))
        try:
            services.allocation_approve(actor=stream.admin, allocation_id=allocation.pk)
        except CapacityExceeded:
            continue
        granted.append(allocation.pk)
        began = time.process_time()
        _deliver_due()
        cpu.append(time.process_time() - began)
    return {"cpu": cpu}


def child_worker(code: str, url: str, manifests: str, stop: str) -> dict[str, Any]:
    """One worker: deliver what is due until ``stop`` exists and nothing is left."""
    _code(code)
    _stream(url, manifests)
    began = time.process_time()
    delivered = 0
    while True:
        done = _deliver_due()
        delivered += done
        if not done:
            if Path(stop).exists():
                break
            time.sleep(0.02)
    return {"cpu_s": time.process_time() - began, "delivered": delivered}


def child_approver(code: str, url: str, manifests: str, rate: float, seconds: float, seed_value: int) -> dict[str, Any]:
    """Approvals at ``rate`` per second for ``seconds`` (queued for the worker), then each push
    row's lag once the worker has delivered them all."""
    _code(code)
    from bench.approval_scale import STREAM

    stream = _stream(url, manifests)
    from allocations.grants import services
    from clusters.models import ClusterPush, PushState
    from kernel.errors import CapacityExceeded

    first = (ClusterPush.objects.order_by("-pk").values_list("pk", flat=True).first() or 0) + 1
    rng = random.Random(seed_value)
    names, weights = list(STREAM), [STREAM[name][0] for name in STREAM]
    granted: list[int] = []
    approved = 0
    start = time.monotonic()
    while (now := time.monotonic() - start) < seconds:
        time.sleep(max(0.0, approved / rate - now))
        if granted and rng.random() < 0.3:
            services.allocation_release(actor=stream.admin, allocation_id=granted.pop(rng.randrange(len(granted))))
        name = rng.choices(names, weights)[0]
        try:
            allocation = services.allocation_approve(
                actor=stream.admin, allocation_id=stream.request(name, rng.choice(STREAM[name][1])).pk
            )
            granted.append(allocation.pk)
        except CapacityExceeded:
            pass
        approved += 1
    elapsed = time.monotonic() - start
    deadline = time.monotonic() + 300
    while ClusterPush.objects.filter(pk__gte=first, state=PushState.PENDING).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    rows = ClusterPush.objects.filter(pk__gte=first, state=PushState.DONE).values_list("created_at", "completed_at")
    lags = [(completed - created).total_seconds() for created, completed in rows if completed is not None]
    pending = ClusterPush.objects.filter(pk__gte=first).exclude(state=PushState.DONE).count()
    return {"approved": approved, "rate": approved / elapsed, "lags": lags, "not_done": pending}


def run_child(name: str, code: str, *arguments: Any, background: bool = False) -> Any:
    """Run step ``name`` with the portal code of ``code``, from that folder: Celery's Django fix-up
    puts the working directory first on the import path."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", name, json.dumps([code, *arguments])]
    if background:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=code)
    result = subprocess.run(command, capture_output=True, text=True, cwd=code, check=False)
    return _figures(name, result.returncode, result.stdout, result.stderr)


def _figures(name: str, code: int, stdout: str, stderr: str) -> dict[str, Any]:
    if code != 0:
        raise SystemExit(f"step {name} failed:\n{stdout[-4000:]}\n{stderr[-4000:]}")
    figures: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return figures


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] if ordered else float("nan")


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="24,2500", help="node counts, comma-separated")
    parser.add_argument("--approvals", type=int, default=100, help="approvals whose push CPU is measured, per size")
    parser.add_argument("--rate", type=float, default=RATE_TARGET, help="approvals per second in the lag run")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the lag run (0: no lag run)")
    parser.add_argument("--fill", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--baseline", help="a checkout of an earlier commit, measured in the same run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("arguments", nargs="?", help=argparse.SUPPRESS)
    return parser.parse_args()


def _seed(owner: str, name: str, size: int, args: argparse.Namespace) -> str:
    import psycopg

    from bench.approval_scale import with_database

    with psycopg.connect(owner, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')
    url = with_database(owner, name)
    result = subprocess.run([sys.executable, str(ROOT / "bench/approval_scale.py"), "--child", "seed",
                             json.dumps([url, size, args.fill, args.seed])], capture_output=True, text=True, cwd=ROOT,
                            check=False)
    print(f"seeded {size} nodes: {_figures('seed', result.returncode, result.stdout, result.stderr)}", flush=True)
    return url


def _lag(code: str, url: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    manifests, stop = tempfile.mkdtemp(dir=work), str(work / f"stop-{time.monotonic_ns()}")
    worker = run_child("worker", code, url, manifests, stop, background=True)
    try:
        figures = run_child("approver", code, url, manifests, args.rate, args.seconds, args.seed + 1)
    finally:
        Path(stop).touch()
        stdout, stderr = worker.communicate(timeout=600)
    figures["worker"] = _figures("worker", worker.returncode, stdout, stderr)
    result: dict[str, Any] = figures
    return result


def _measure(args: argparse.Namespace, owner: str, work: Path) -> None:
    base = urlsplit(owner).path.lstrip("/") or "gpuportal"
    codes = {"this checkout": str(ROOT)} | ({"baseline": str(Path(args.baseline).resolve())} if args.baseline else {})
    cpu: dict[tuple[str, int], list[float]] = {}
    lag: dict[tuple[str, int], dict[str, Any]] = {}
    for size in [int(size) for size in args.sizes.split(",")]:
        for label, code in codes.items():
            url = _seed(owner, f"{base}_push_{size}", size, args)
            cpu[label, size] = run_child("cpu", code, url, args.approvals, args.seed, tempfile.mkdtemp(dir=work))["cpu"]
            print(f"  {label}, {size} nodes: worker CPU per approval's push p50 {1000 * percentile(cpu[label, size], 0.5):.1f} ms",
                  flush=True)
            if args.seconds:
                lag[label, size] = _lag(code, url, args, work)
    _report(args, codes, cpu, lag)


def _report(args: argparse.Namespace, codes: dict[str, str], cpu: dict[tuple[str, int], list[float]],
            lag: dict[tuple[str, int], dict[str, Any]]) -> None:
    print(f"worker CPU per approval's push (its project's and the cluster-wide objects', manifests driver), "
          f"{args.approvals} approvals:")
    for (label, size), values in cpu.items():
        print(f"  {size:>5} nodes, {label:>13}: mean {1000 * statistics.fmean(values):8.1f} ms  "
              f"p50 {1000 * percentile(values, 0.5):8.1f} ms  p99 {1000 * percentile(values, 0.99):8.1f} ms")
    for (label, size), values in cpu.items():
        if label == "this checkout" and ("baseline", size) in cpu:
            before = statistics.fmean(cpu["baseline", size])
            print(f"  {size:>5} nodes: baseline / this checkout (mean) {before / statistics.fmean(values):.1f}x")
    for (label, size), figures in lag.items():
        lags, worker = figures["lags"], figures["worker"]
        p99 = percentile(lags, 0.99)
        reached = figures["rate"] >= RATE_TARGET * 0.95
        met = p99 <= LAG_TARGET_S and reached and not figures["not_done"]
        print(f"push lag, {size} nodes, {label}: {figures['approved']} approvals at {figures['rate']:.1f}/s, "
              f"{len(lags)} pushes: p50 {percentile(lags, 0.5):.2f} s  p99 {p99:.2f} s; worker CPU "
              f"{1000 * worker['cpu_s'] / max(figures['approved'], 1):.1f} ms per approval; not delivered "
              f"{figures['not_done']} (target p99 <= {LAG_TARGET_S:.0f} s at {RATE_TARGET:.0f} approvals/s: "
              f"{'MET' if met else 'NOT MET'}" + ("" if reached else f"; the approver reached {figures['rate']:.1f}/s only")
              + ")")


def main() -> None:
    args = _arguments()
    if args.child:
        steps: dict[str, Callable[..., dict[str, Any]]] = {"cpu": child_cpu, "worker": child_worker, "approver": child_approver}
        print(json.dumps(steps[args.child](*json.loads(args.arguments))))
        return
    sys.path.insert(0, str(ROOT))
    stop_services = False
    owner = os.environ.get("DATABASE_URL", "")
    if not owner.startswith("postgres"):
        from bench.portal_server import services_up

        os.environ.update(services_up())
        owner, stop_services = os.environ["DATABASE_URL"], True
    try:
        with tempfile.TemporaryDirectory(prefix="push-scale-") as work:
            _measure(args, owner, Path(work))
    finally:
        import psycopg

        base = urlsplit(owner).path.lstrip("/") or "gpuportal"
        with psycopg.connect(owner, autocommit=True) as connection:
            for size in args.sizes.split(","):
                connection.execute(f'DROP DATABASE IF EXISTS "{base}_push_{int(size)}" WITH (FORCE)')
        if stop_services:
            subprocess.run([str(ROOT / "scripts/services.sh"), "down"], check=False)


if __name__ == "__main__":
    main()

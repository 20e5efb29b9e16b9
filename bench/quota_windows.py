"""Benchmark (not a timed test): quota windows, their effective numbers and the tick that applies them.

    .venv/bin/python bench/quota_windows.py [--departments 1000] [--evaluations 20000] [--seed 42]
    .venv/bin/python bench/quota_windows.py --quick

Builds ``--departments`` departments, each with one quota and 3 approved windows: a festival
(temporary, 1-4 days, beginning within 10 days either side of now), a nightly window (FREQ=DAILY
at 20:00 for 12 hours) and a weekend one (FREQ=WEEKLY;BYDAY=SA,SU for 24 hours, or Fridays 18:00
for 60 hours), the recurring ones in Europe/Berlin, America/New_York, Asia/Shanghai or UTC, begun
up to a year ago; deltas or absolute values, a third of them for one of two priority classes.
Every edge falls on a whole hour (UTC), so a tick a few minutes past one has nothing due.

Pure part, in memory (``allocations.quotas.windows``, no database): ``effective()`` evaluations
per second at random instants of the next week; ``lowest()`` over a one-day request per second;
``edges()`` over one minute for every quota (what a tick computes) in a fresh process (rules read
for the first time) and warm (median over consecutive minutes), and warm again with each rule
counted from its own DTSTART (the search not moved forward), for the ratio.

Tick (``allocations.windows.tick.quota_windows_tick(now=...)``, the real service, on a throw-away
SQLite database set up as ``bench/admission.py`` does, one active cluster): the same windows as
rows; a first tick applies what is due at the hour, then quiet ticks every 30 seconds (edges in
the lookback applied already, no shrink within 30 minutes), median and worst; then 100 festivals
(as many as departments, at most) begin 10 seconds before a tick: the tick that applies those 100
edges. Cluster pushes are queued in the outbox as in production and not delivered (the delivery
worker's job, not the tick's). Target: a quiet tick under 100 ms.
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
from collections.abc import Callable
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from allocations.quotas import windows  # noqa: E402 - after the path is set
from allocations.quotas.windows import WindowSpec  # noqa: E402

UTC = datetime.UTC
NOW = datetime.datetime(2026, 6, 15, 10, 0, 5, tzinfo=UTC)  # 5 s past an hour: its edges are due
ZONES = ("Europe/Berlin", "America/New_York", "Asia/Shanghai", "UTC")
MINUTE = datetime.timedelta(minutes=1)
CLASSES = (1, 2)


def hours(count: float) -> datetime.timedelta:
    return datetime.timedelta(hours=count)


def build(departments: int, seed: int) -> dict[int, list[WindowSpec]]:
    """Quota id (1..departments) → its three windows (ids 3q-2, 3q-1, 3q)."""
    rng = random.Random(seed)
    out = {}
    for quota in range(1, departments + 1):
        def values() -> dict[str, Any]:
            field = rng.choice(["limit", "guaranteed"])
            if rng.random() < 0.7:
                return {f"{field}_delta": Decimal(rng.choice([-4, -2, 2, 4, 8]))}
            return {field: Decimal(rng.randint(0, 16))}

        def group() -> int | None:
            return rng.choice(CLASSES) if rng.random() < 1 / 3 else None

        begins = NOW.replace(second=0) + hours(rng.randint(-240, 240))
        festival = WindowSpec(id=3 * quota - 2, kind="temporary", begins_at=begins,
                              ends_at=begins + hours(24 * rng.randint(1, 4)), **values())
        started = NOW.replace(second=0) - hours(24 * rng.randint(0, 365) + rng.randint(0, 23))
        nightly = WindowSpec(id=3 * quota - 1, kind="recurring", begins_at=started, rrule="FREQ=DAILY;BYHOUR=20;BYMINUTE=0",
                             timezone=rng.choice(ZONES), duration=hours(12), priority_class_id=group(), **values())
        weekend_rule, length = rng.choice([("FREQ=WEEKLY;BYDAY=SA,SU;BYHOUR=0;BYMINUTE=0", 24),
                                           ("FREQ=WEEKLY;BYDAY=FR;BYHOUR=18;BYMINUTE=0", 60)])
        weekend = WindowSpec(id=3 * quota, kind="recurring", begins_at=started, rrule=weekend_rule,
                             timezone=rng.choice(ZONES), duration=hours(length), priority_class_id=group(), **values())
        out[quota] = [festival, nightly, weekend]
    return out


def timed(call: Callable[[], Any]) -> float:
    began = time.perf_counter()
    call()
    return time.perf_counter() - began


def quiet_edges(specs: dict[int, list[WindowSpec]], minute: datetime.datetime) -> int:
    return sum(len(windows.edges(found, minute, minute + MINUTE)) for found in specs.values())


def pure(specs: dict[int, list[WindowSpec]], *, evaluations: int, minutes: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    quota_ids = list(specs)
    start = NOW.replace(second=0, minute=5)  # 10:05: no edge within the minute
    figures = {"edges_cold_ms": 1000 * timed(lambda: quiet_edges(specs, start))}
    warm = [1000 * timed(partial(quiet_edges, specs, start + MINUTE * k)) for k in range(1, minutes + 1)]
    figures["edges_warm_ms"] = statistics.median(warm)
    asks = [(rng.choice(quota_ids), NOW + datetime.timedelta(seconds=rng.randint(0, 7 * 86400)),
             rng.choice([None, None, *CLASSES])) for _ in range(evaluations)]
    seconds = timed(lambda: [windows.effective(guaranteed=Decimal(4), limit=Decimal(8), windows=specs[q], at=t,
                                               priority_class_id=c) for q, t, c in asks])
    figures["effective_per_s"] = evaluations / seconds
    requests = asks[: max(evaluations // 20, 10)]
    seconds = timed(lambda: [windows.lowest(guaranteed=Decimal(4), limit=Decimal(8), windows=specs[q], start=t,
                                            end=t + hours(24), priority_class_id=c) for q, t, c in requests])
    figures["lowest_per_s"] = len(requests) / seconds
    forward = windows._forward
    windows._forward = lambda compiled, dtstart, before: dtstart  # counted from DTSTART
    try:
        plain = [1000 * timed(partial(quiet_edges, specs, start + MINUTE * k)) for k in range(1, max(minutes // 4, 2))]
    finally:
        windows._forward = forward
    figures["edges_from_dtstart_ms"] = statistics.median(plain)
    return figures


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


def seed_rows(specs: dict[int, list[WindowSpec]]) -> tuple[Any, dict[int, int]]:
    """The departments, quotas and approved windows as rows; returns the requester and quota ids."""
    from django.contrib.auth.models import User

    from allocations.models import PriorityClass, Quota, QuotaWindow
    from clusters.models import Cluster
    from tenants.models import Department

    admin = User.objects.create(username="platform", is_staff=True)
    Cluster.objects.create(name="bench")
    classes = {n: PriorityClass.objects.create(name=f"class-{n}", value=100 * n).pk for n in CLASSES}
    departments = Department.objects.bulk_create(
        [Department(slug=f"dept-{q:04d}", name=f"Department {q}") for q in specs])
    quotas = Quota.objects.bulk_create([Quota(department=d, guaranteed=Decimal(4), limit=Decimal(8)) for d in departments])
    ids = {q: quota.pk for q, quota in zip(specs, quotas, strict=True)}
    QuotaWindow.objects.bulk_create([
        QuotaWindow(quota_id=ids[q], kind=w.kind, state="approved", begins_at=w.begins_at, ends_at=w.ends_at,
                    rrule=w.rrule, timezone=w.timezone if w.kind == "recurring" else "",
                    duration_minutes=int(w.duration.total_seconds() // 60) if w.duration else None,
                    guaranteed_delta=w.guaranteed_delta, limit_delta=w.limit_delta, guaranteed=w.guaranteed,
                    limit=w.limit, priority_class_id=classes.get(w.priority_class_id or 0), requested_by=admin,
                    decided_by=admin, decided_at=NOW - hours(1000))
        for q, found in specs.items() for w in found])
    return admin, ids


def tick(specs: dict[int, list[WindowSpec]], *, quiet: int, due: int) -> dict[str, float] | str:
    try:
        from allocations.windows import tick as window_tick
    except ImportError:
        return "allocations/windows/tick.py is not there: the pure parts only"
    import clusters.outbox
    from allocations.models import QuotaWindow

    clusters.outbox.push_dispatch = lambda **kwargs: True  # queued in the outbox, delivered by the worker
    admin, ids = seed_rows(specs)
    figures: dict[str, float] = {}
    first = window_tick.quota_windows_tick(now=NOW)
    figures["first_tick_edges"] = len(first.applied)
    moments = [NOW + datetime.timedelta(minutes=10, seconds=30 * k) for k in range(quiet)]
    times = []
    for moment in moments:
        began = time.perf_counter()
        result = window_tick.quota_windows_tick(now=moment)
        times.append(1000 * (time.perf_counter() - began))
        assert not result.applied and not result.warned, "a quiet tick found something to do"
    figures["quiet_ms"], figures["quiet_worst_ms"] = statistics.median(times), max(times)
    at = moments[-1] + datetime.timedelta(seconds=20)
    QuotaWindow.objects.bulk_create([
        QuotaWindow(quota_id=quota_id, kind="temporary", state="approved", begins_at=at, ends_at=at + hours(48),
                    limit_delta=Decimal(4), requested_by=admin, decided_by=admin, decided_at=at - hours(1))
        for quota_id in list(ids.values())[:due]])
    began = time.perf_counter()
    result = window_tick.quota_windows_tick(now=at + datetime.timedelta(seconds=10))
    figures["due_ms"] = 1000 * (time.perf_counter() - began)
    figures["due_edges"] = len(result.applied)
    assert len(result.applied) == min(due, len(ids)), result.applied
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--departments", type=int, default=1000)
    parser.add_argument("--evaluations", type=int, default=20000)
    parser.add_argument("--minutes", type=int, default=20, help="warm edges(): consecutive minutes")
    parser.add_argument("--quiet", type=int, default=10, help="quiet ticks, 30 s apart")
    parser.add_argument("--due", type=int, default=100, help="edges due in the busy tick")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--quick", action="store_true", help="a few departments: a smoke run, figures meaningless")
    args = parser.parse_args()
    if args.quick:
        args.departments, args.evaluations, args.minutes, args.quiet, args.due = 30, 300, 3, 3, 10
    print("command: " + " ".join([Path(sys.executable).name, "bench/quota_windows.py", *sys.argv[1:]]))
    specs = build(args.departments, args.seed)
    count = sum(len(found) for found in specs.values())
    print(f"{args.departments} departments, {count} windows (a festival, a nightly and a weekend window each), "
          f"seed {args.seed}")
    figures = pure(specs, evaluations=args.evaluations, minutes=args.minutes, seed=args.seed)
    print(f"effective(): {figures['effective_per_s']:,.0f} evaluations/s (3 windows a quota, random instants "
          f"over a week); lowest() over one day: {figures['lowest_per_s']:,.0f}/s")
    print(f"edges() over one minute for all {args.departments} quotas: {figures['edges_warm_ms']:.1f} ms warm "
          f"(median of {args.minutes} minutes), {figures['edges_cold_ms']:.1f} ms in a fresh process; counted from "
          f"each rule's DTSTART instead: {figures['edges_from_dtstart_ms']:.1f} ms "
          f"(x{figures['edges_from_dtstart_ms'] / max(figures['edges_warm_ms'], 1e-6):.1f})")
    with tempfile.TemporaryDirectory() as work:
        setup_django(Path(work))
        ticks = tick(specs, quiet=args.quiet, due=args.due)
    if isinstance(ticks, str):
        print(f"tick: {ticks}")
        return
    verdict = "within" if ticks["quiet_ms"] < 100 else "OVER"
    print(f"tick (SQLite): first tick applied {ticks['first_tick_edges']:.0f} edges due at the hour; quiet tick "
          f"{ticks['quiet_ms']:.1f} ms median, {ticks['quiet_worst_ms']:.1f} ms worst of {args.quiet} "
          f"({verdict} the 100 ms target)")
    print(f"tick with {ticks['due_edges']:.0f} edges due: {ticks['due_ms']:.0f} ms "
          f"({ticks['due_ms'] / max(ticks['due_edges'], 1):.1f} ms an edge)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The policy twin's benchmark (docs/twin.md): the four policies on the same demand, on the
shared Alibaba trace and on a generated month, a table each, then one line per target of issue 32
with MET / NOT MET / NOT MEASURED.

Run from the repository root::

    .venv/bin/python bench/twin.py                 # 30 days x 50,000 requests on 1,000 nodes
    .venv/bin/python bench/twin.py --quick         # 14 days x 3,000 requests on 150 nodes
    .venv/bin/python bench/twin.py --no-trace --policies static,full --load-steps 0
    DATABASE_URL=... .venv/bin/python bench/twin.py --from-history 30d   # the portal's own month
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from placement import Node  # noqa: E402
from placement.simulation.trace import node_list_path, pod_list_path  # noqa: E402
from twin.clusters import installed_gpus, nodes_load  # noqa: E402
from twin.policy import Policy, policy_with_rules  # noqa: E402
from twin.replay.engine import replay  # noqa: E402
from twin.replay.fairness import ALONE, ALONE_DRAIN_S, with_fairness  # noqa: E402
from twin.replay.load import LoadSearch, sustainable_load  # noqa: E402
from twin.replay.metrics import Metrics, measure  # noqa: E402
from twin.replay.modes import POLICIES  # noqa: E402
from twin.sources.alibaba import trace_load, trace_policy  # noqa: E402
from twin.sources.generator import GeneratorSpec, generated_policy, workload_generate  # noqa: E402
from twin.workload import Job  # noqa: E402

SPEED_TARGET_S = 300.0


@dataclass(frozen=True)
class Scenario:
    """A source of demand, rebuilt in each worker process (deterministic)."""

    name: str
    nodes: int
    spec: GeneratorSpec | None = None  # None: the Alibaba trace
    rules: str | None = None  # a file of rules over time (windows, idle policies, fair share)

    def build(self) -> tuple[list[Job], list[Node], Policy]:
        every = [node for node in nodes_load(node_list_path(REPO_ROOT)) if node.gpus]
        nodes = spread(every, self.nodes)
        if self.spec is None:
            return trace_load(pod_list_path("default", REPO_ROOT)), nodes, self._ruled(trace_policy(installed_gpus(nodes)))
        spec = replace(self.spec, installed_gpus=installed_gpus(nodes))
        return workload_generate(spec), nodes, self._ruled(generated_policy(spec))

    def _ruled(self, policy: Policy) -> Policy:
        if self.rules is None:
            return policy
        path = Path(self.rules)
        return policy_with_rules(policy, path.read_text(), source=path.name)


def spread(nodes: list[Node], count: int) -> list[Node]:
    """``count`` nodes taken evenly through the list (the trace's mix of models and sizes kept)."""
    if count >= len(nodes):
        return nodes
    return [nodes[index * len(nodes) // count] for index in range(count)]


def _run(task: tuple[Scenario, str]) -> Metrics:
    scenario, policy = task
    jobs, nodes, rules = scenario.build()
    drain = {"drain_s": ALONE_DRAIN_S} if policy == ALONE else {}
    return measure(replay(jobs, nodes, rules, policy, **drain))


def _of(done: list[Metrics], tasks: list[tuple[Scenario, str]], name: str) -> list[Metrics]:
    return [m for m, (scenario, _) in zip(done, tasks, strict=True) if scenario.name == name]


def fair(done: list[Metrics]) -> list[Metrics]:
    """The policies compared, each with its finish-time fairness against the alone replay."""
    alone = next(m for m in done if m.policy == ALONE)
    return [with_fairness(m, alone) for m in done if m.policy != ALONE]


def _load(task: tuple[Scenario, str, int]) -> LoadSearch:
    scenario, policy, steps = task
    jobs, nodes, rules = scenario.build()
    return sustainable_load(jobs, nodes, rules, policy, steps=steps)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f}"


def table(title: str, rows: list[Metrics]) -> None:
    print(f"\n{title}")
    print(f"{'policy':8} {'alloc%':>7} {'busy%':>6} {'work GPU-h':>11} {'wait p50/p95/p99 min':>22} "
          f"{'in-guar p99':>11} {'viol%':>6} {'reclaimed':>9} {'lost GPU-h':>10} {'Jain':>5} {'FTF max/p95':>12} "
          f"{'wall s':>7}")
    for m in rows:
        t = m.total
        waits = f"{_minutes(t.waits.p50)}/{_minutes(t.waits.p95)}/{_minutes(t.waits.p99)}"
        print(f"{m.policy:8} {100 * t.allocation:7.1f} {100 * t.busy:6.1f} {t.work_gpu_h:11.0f} {waits:>22} "
              f"{_minutes(m.waits_in_guarantee.p99):>11} {100 * m.violation_ratio:6.2f} {t.reclaims:9d} "
              f"{t.lost_gpu_h:10.0f} {m.jain:5.2f} {_ftf(m):>12} {m.wall_s:7.1f}")


def _ftf(m: Metrics) -> str:
    f = m.finish_fairness
    return "-" if f is None else f"{f.worst:.1f}/{f.p95:.2f}"


def departments(m: Metrics) -> None:
    print(f"\n  per department ({m.policy}): alloc% busy% work GPU-h  wait p50/p95/p99 min  viol GPU-h  reclaimed")
    for d in m.departments:
        w = d.waits
        print(f"  {d.name:10} {100 * d.allocation:6.1f} {100 * d.busy:5.1f} {d.work_gpu_h:10.0f}  "
              f"{_minutes(w.p50):>6}/{_minutes(w.p95)}/{_minutes(w.p99):<8} {d.violations_gpu_h:10.0f} {d.reclaims:9d}")
    print(f"  rules over time ({m.policy}): {m.window_edges} quota window edges, {m.idle_warnings} idle warnings, "
          f"{m.idle_reclaims} idle reclaims, {m.shrink_reclaims} grants a shrink took back")
    print(f"  waits by class ({m.policy}): " + "; ".join(
        f"{name} p50/p95/p99 {_minutes(w.p50)}/{_minutes(w.p95)}/{_minutes(w.p99)} min (n={w.count})"
        for name, w in m.waits_by_class.items()))


def verdict(met: bool | None) -> str:
    return "NOT MEASURED" if met is None else ("MET" if met else "NOT MET")


def targets(month: dict[str, Metrics], loads: dict[str, LoadSearch], *, full_scale: bool) -> None:
    full, static = month.get("full"), month.get("static")
    print("\nTargets (issue 32, on the generated month):")
    speed = full.wall_s if full is not None else None
    scale = "" if full_scale else " (this run is smaller than 30 days x 50,000 requests on 1,000 nodes)"
    print(f"  replay 30 days x 50,000 requests on 1,000 nodes <= 5 min on 2 cores: "
          f"{verdict(speed <= SPEED_TARGET_S if speed is not None and full_scale else None)}"
          f" (full policy: {speed or 0:.0f} s{scale})")
    if static is not None:
        print(f"  workload: static partitioning allocates <= 50 %: {verdict(static.total.allocation <= 0.5)}"
              f" ({100 * static.total.allocation:.1f} %)")
    alloc = full.total.allocation if full is not None else None
    print(f"  full policy >= 85 % time-weighted allocation: {verdict(alloc >= 0.85 if alloc is not None else None)}"
          f" ({100 * (alloc or 0):.1f} %)")
    if "full" in loads and "static" in loads and loads["static"].multiplier > 0:
        ratio = loads["full"].multiplier / loads["static"].multiplier
        print(f"  sustainable load >= 2.7x static partitioning's: {verdict(ratio >= 2.7)} ({ratio:.2f}x: "
              f"{loads['full'].multiplier:.2f} vs {loads['static'].multiplier:.2f})")
    else:
        print("  sustainable load >= 2.7x static partitioning's: NOT MEASURED")
    viol = full.violation_ratio if full is not None else None
    print(f"  guarantee violations <= 0.1 % of guaranteed GPU-hours: {verdict(viol <= 0.001 if viol is not None else None)}"
          f" ({100 * (viol or 0):.3f} %)")
    ftf = full.finish_fairness if full is not None else None
    print(f"  worst finish-time fairness <= 1.5: {verdict(ftf.worst <= 1.5 if ftf is not None else None)}"
          + (f" (worst {ftf.worst:.2f}, p95 {ftf.p95:.2f}, median {ftf.median:.2f} over {ftf.count:,} requests; "
             f"{ftf.left_out} never finish on their share)" if ftf is not None else ""))


def from_history(days_text: str, policies: list[str]) -> int:
    """The four policies on the portal's own history, inventory and policy (``whatifs.sources``;
    the database of DATABASE_URL, through Django's settings)."""
    import os

    if not os.environ.get("DATABASE_URL"):
        print("--from-history reads the portal's database: set DATABASE_URL", file=sys.stderr)
        return 2
    days = float(days_text.rstrip("d"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuportal.settings")
    import django

    django.setup()
    from kernel.clock import clock_now
    from whatifs.sources import history_workload, inventory_nodes, live_policy

    jobs, nodes, rules = history_workload(days=days, now=clock_now()), inventory_nodes(), live_policy()
    if not jobs or not nodes:
        print(f"nothing to replay: {len(jobs)} requests in the last {days:g} days, {len(nodes)} nodes", file=sys.stderr)
        return 1
    partitionable = all(d.guarantee > 0 for d in rules.departments)
    if "static" in policies and not partitionable:
        print("static partitioning left out: a department without a guarantee would own no node")
    rows = [measure(replay(jobs, nodes, rules, policy, horizon=86400.0 * days))
            for policy in policies if policy != "static" or partitionable]
    table(f"The portal's history: {len(jobs):,} requests of the last {days:g} days on {len(nodes):,} nodes "
          f"({installed_gpus(nodes):,} GPUs)", rows)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="14 days x 3,000 requests on 150 nodes; the load search smaller")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--no-trace", action="store_true", help="skip the Alibaba trace")
    ap.add_argument("--load-steps", type=int, default=3, help="bisection steps of the sustainable load (0: skip it)")
    ap.add_argument("--load-scale", type=float, default=0.1,
                    help="the load search's month: this fraction of the nodes and requests (each probe is a replay)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--from-history", metavar="DAYS", default=None,
                    help="replay the portal's own last DAYS (e.g. 30d) instead (needs DATABASE_URL)")
    ap.add_argument("--rules", help="a YAML file of start, windows, idle_policies and fair_share (docs/twin.md, "
                                    "\"Policies\") laid over the generated and the trace's policies")
    args = ap.parse_args(argv)
    if args.quick:
        args.nodes, args.requests, args.days = 150, 3000, 14.0
    policies = [p for p in args.policies.split(",") if p]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        ap.error(f"unknown policy {unknown[0]!r} (known: {', '.join(POLICIES)})")
    if args.from_history:
        return from_history(args.from_history, policies)
    spec = GeneratorSpec(seed=args.seed, days=args.days, requests=args.requests)
    month = Scenario("month", args.nodes, spec, args.rules)
    small = Scenario("load", max(20, round(args.nodes * args.load_scale)),
                     replace(spec, requests=max(500, round(args.requests * args.load_scale))), args.rules)
    began = time.perf_counter()
    compared = [*policies, ALONE]
    tasks = [(month, p) for p in compared] + ([] if args.no_trace else [(Scenario("trace", 10_000, rules=args.rules), p) for p in compared])
    load_tasks = [(small, p, args.load_steps) for p in ("static", "full") if p in policies and args.load_steps > 0]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        done = list(pool.map(_run, tasks))
        loads = {search.policy: search for search in pool.map(_load, load_tasks)}
    by_month = {m.policy: m for m in fair(_of(done, tasks, "month"))}
    jobs, nodes, _ = month.build()
    table(f"Generated month: {len(jobs):,} requests over {args.days:g} days on {len(nodes):,} nodes "
          f"({installed_gpus(nodes):,} GPUs), 8 departments, seed {args.seed}", list(by_month.values()))
    for m in by_month.values():
        if m.policy in ("static", "full"):
            departments(m)
    if not args.no_trace:
        trace_jobs, trace_nodes, _ = Scenario("trace", 10_000).build()
        table(f"Alibaba trace v2023 (default list): {len(trace_jobs):,} GPU tasks on {len(trace_nodes):,} nodes "
              f"({installed_gpus(trace_nodes):,} GPUs)", fair(_of(done, tasks, "trace")))
    for search in loads.values():
        tried = ", ".join(f"{m:.2f}x: {p99 / 60:.1f} min" for m, p99 in search.tried)
        print(f"\nsustainable load ({search.policy}, {small.nodes} nodes, {small.spec.requests if small.spec else 0} "
              f"requests): {search.multiplier:.2f}x  (in-guarantee p99 wait at {tried})")
    targets(by_month, loads, full_scale=args.nodes >= 1000 and args.requests >= 50_000 and args.days >= 30)
    print(f"\ntotal wall time {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

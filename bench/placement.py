#!/usr/bin/env python3
"""Placement benchmark: one protocol run, or the whole policy x seed grid.

Protocol: ``../shared/reference/placement-benchmark.md`` §2 and §7 (B1; B2 with ``--mig``).
Run from the repository root, e.g.::

    .venv/bin/python bench/placement.py --policy fgd --seed 42
    .venv/bin/python bench/placement.py --pods gpuspec33          # grid, seeds 42 43 44
    .venv/bin/python bench/placement.py --mig --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from placement.policies import POLICY_NAMES  # noqa: E402
from placement.simulation.mig_ratio import InstanceDraw, cpsat_ratios  # noqa: E402
from placement.simulation.replay import RunResult  # noqa: E402
from placement.simulation.run import run_one  # noqa: E402
from placement.simulation.trace import node_list_path, pod_list_path  # noqa: E402

PUBLIC_SEEDS = (42, 43, 44)
BUDGET_SECONDS = 15.0


def _job(args: tuple[str, str, int, str, bool]) -> RunResult:
    nodes, pods, seed, policy, mig = args
    return run_one(Path(nodes), Path(pods), seed, policy, mig)


def _fmt_opt(v: tuple[float, float] | None) -> str:
    return "none" if v is None else f"x={v[0]:.2f} A={v[1]:.2f}"


def print_run(r: RunResult, unit: str) -> None:
    f90 = r.frag.get(90)
    print(f"policy {r.policy}  seed {r.seed}  pods {r.pods}  ({unit})")
    print(f"  A100 {r.a100:.2f} %   A130 {r.a130:.2f} %")
    print(f"  first rejection: {_fmt_opt(r.first_rejection)}   first x with A < x-1: "
          f"{'none' if r.first_gap_x is None else f'{r.first_gap_x:.2f}'}")
    if f90 is not None:
        print(f"  fragmentation at x=90: rate {f90[0]:.1f} % of idle, amount {f90[1]:.2f} % of capacity")
    print("  rejected by kind: " + (", ".join(f"{k} {v}" for k, v in r.rejected.items()) or "none"))
    over = "  OVER BUDGET" if r.wall_seconds > BUDGET_SECONDS else ""
    print(f"  {r.decisions_per_second:,.0f} decisions/s, p99 decision latency {r.p99_ms:.2f} ms, "
          f"wall {r.wall_seconds:.1f} s (CPU {r.cpu_seconds:.1f} s){over}")


def _ms(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:6.2f}" if values else "   n/a"
    return f"{statistics.mean(values):6.2f} ± {statistics.stdev(values):.2f}"


def grid_table(results: list[RunResult]) -> list[dict[str, Any]]:
    rows = []
    for name in dict.fromkeys(r.policy for r in results):
        rs = [r for r in results if r.policy == name]
        rows.append({
            "policy": name,
            "a100": [r.a100 for r in rs],
            "a130": [r.a130 for r in rs],
            "first_rejection_x": [r.first_rejection[0] if r.first_rejection else None for r in rs],
            "frag90_rate": [r.frag[90][0] for r in rs if 90 in r.frag],
            "decisions_per_second": statistics.mean(r.decisions_per_second for r in rs),
            "p99_ms": max(r.p99_ms for r in rs),
            "max_wall_seconds": max(r.wall_seconds for r in rs),
            "max_cpu_seconds": max(r.cpu_seconds for r in rs),
        })
    return rows


def print_grid(rows: list[dict[str, Any]], seeds: list[int], unit: str) -> None:
    print(f"seeds {' '.join(map(str, seeds))}; mean ± sd over seeds; {unit}")
    print(f"{'policy':<11} {'A100 %':>14} {'A130 %':>14} {'1st rej x':>10} {'frag90 %':>9} "
          f"{'dec/s':>8} {'p99 ms':>7} {'wall s':>7} {'CPU s':>6}")
    for row in rows:
        rej = [x for x in row["first_rejection_x"] if x is not None]
        print(f"{row['policy']:<11} {_ms(row['a100']):>14} {_ms(row['a130']):>14} "
              f"{(statistics.mean(rej) if rej else float('nan')):>10.2f} "
              f"{(statistics.mean(row['frag90_rate']) if row['frag90_rate'] else float('nan')):>9.1f} "
              f"{row['decisions_per_second']:>8,.0f} {row['p99_ms']:>7.2f} {row['max_wall_seconds']:>7.1f} "
              f"{row['max_cpu_seconds']:>6.1f}")


def run_cpsat(nodes: Path, pods: Path, instances: int, seed: int, policies: tuple[str, ...], as_json: bool) -> int:
    rows = cpsat_ratios(nodes, pods, InstanceDraw(instances, seed), policies)
    ratios = {p: [r.online[p] / r.optimum for r in rows if r.optimum] for p in policies}
    if as_json:
        print(json.dumps({"instances": [r.__dict__ for r in rows],
                          "ratio": {p: {"mean": statistics.mean(v), "min": min(v)} for p, v in ratios.items()}},
                         indent=1))
        return 0
    print(f"{instances} instances (2 trace nodes, MIG pods to 130 % of their slices), seed {seed}")
    print(f"{'#':>3} {'GPUs':>4} {'pods':>4} {'optimum':>7} {'proven':>6} " + " ".join(f"{p:>9}" for p in policies))
    for r in rows:
        print(f"{r.instance:>3} {r.gpus:>4} {r.requests:>4} {r.optimum:>7} {str(r.proven):>6} "
              + " ".join(f"{r.online[p]:>9}" for p in policies))
    for p, v in ratios.items():
        print(f"{p}: online / optimum mean {statistics.mean(v):.4f}, min {min(v):.4f}, "
              f"optimal on {sum(x >= 1 for x in v)} of {len(v)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default=None, help="node CSV (default: the trace's GPU node list)")
    ap.add_argument("--pods", default="default",
                    help="pod CSV, or a trace list name such as default, gpuspec33, multigpu50, gpushare100")
    ap.add_argument("--seed", type=int, action="append", help="seed (repeatable; grid default 42 43 44)")
    ap.add_argument("--policy", action="append", choices=POLICY_NAMES,
                    help="run only this policy (repeatable); without it the whole grid runs")
    ap.add_argument("--mig", action="store_true", help="benchmark B2: every GPU in MIG mode")
    ap.add_argument("--json", action="store_true", help="print JSON instead of text")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--cpsat", type=int, metavar="N", default=0,
                    help="with --mig: compare online policies with the CP-SAT optimum on N small instances")
    args = ap.parse_args(argv)

    nodes = Path(args.nodes) if args.nodes else node_list_path(REPO_ROOT)
    pods = pod_list_path(args.pods, REPO_ROOT)
    for p in (nodes, pods):
        if not p.exists():
            ap.error(f"{p} does not exist")
    unit = "MIG compute slices" if args.mig else "GPU milli"
    if args.cpsat:
        if not args.mig:
            ap.error("--cpsat needs --mig")
        return run_cpsat(nodes, pods, args.cpsat, (args.seed or [PUBLIC_SEEDS[0]])[0],
                         tuple(args.policy or ("ours", "fgd", "firstfit", "bestfit")), args.json)
    single = args.policy is not None and len(args.policy) == 1 and (args.seed is None or len(args.seed) == 1)
    seeds = args.seed or ([PUBLIC_SEEDS[0]] if single else list(PUBLIC_SEEDS))
    policies = args.policy or list(POLICY_NAMES)
    jobs = [(str(nodes), str(pods), s, p, args.mig) for p in policies for s in seeds]
    t0 = time.perf_counter()
    if args.workers > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(args.workers) as pool:
            results = list(pool.map(_job, jobs))
    else:
        results = [_job(j) for j in jobs]
    wall = time.perf_counter() - t0
    if args.json:
        out: dict[str, Any] = {"nodes": str(nodes), "pods": str(pods), "mig": args.mig, "unit": unit,
                               "wall_seconds": wall, "runs": [r.to_json() for r in results]}
        if not single:
            out["grid"] = grid_table(results)
        print(json.dumps(out, indent=1))
    elif single:
        print_run(results[0], unit)
    else:
        print(f"pods {pods.name}, nodes {nodes.name}")
        print_grid(grid_table(results), seeds, unit)
        print(f"total wall {wall:.1f} s with {args.workers} worker(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""The twin's speed curve (docs/twin.md, "Speed"): the full policy's replay of the generated month
at growing sizes, CPU seconds of one process each, the exponent fitted between the last two sizes,
and the full size (30 days x 50,000 requests on 1,000 nodes) extrapolated with it, MET / NOT MET
against 5 minutes.

Run from the repository root::

    .venv/bin/python bench/twin_speed.py                          # 50, 100, 200 nodes
    .venv/bin/python bench/twin_speed.py --nodes 100,200,400
    .venv/bin/python bench/twin_speed.py --nodes 1000             # the full size itself, measured

Requests scale with the nodes (``--per-node``, 50: the target's 50,000 on 1,000 nodes); each row
is ``replay(...)`` of the month exactly as ``bench/twin.py`` builds it (``Scenario``). The baseline
of the ratios is the smallest size: the cost per request against it says how far from linear the
replay grows.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.twin import SPEED_TARGET_S, Scenario  # noqa: E402
from twin.clusters import installed_gpus  # noqa: E402
from twin.replay.engine import Replay  # noqa: E402
from twin.sources.generator import GeneratorSpec  # noqa: E402

FULL_NODES, FULL_REQUESTS = 1000, 50_000


def measured(nodes: int, requests: int, days: float, seed: int) -> tuple[float, float, int, int]:
    """CPU and wall seconds of the full policy's replay, the installed GPUs and the reclaims."""
    jobs, cluster, policy = Scenario("month", nodes, GeneratorSpec(seed=seed, days=days, requests=requests)).build()
    cpu, wall = time.process_time(), time.perf_counter()
    outcome = Replay(jobs, cluster, policy, "full").run()
    return time.process_time() - cpu, time.perf_counter() - wall, installed_gpus(cluster), outcome.reclaims


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="50,100,200", help="comma-separated sizes, smallest first")
    ap.add_argument("--per-node", type=int, default=FULL_REQUESTS // FULL_NODES, help="requests per node")
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    sizes = sorted(int(n) for n in args.nodes.split(",") if n)
    print(f"{'nodes':>6} {'GPUs':>6} {'requests':>9} {'reclaims':>9} {'CPU s':>8} {'wall s':>8} "
          f"{'CPU/request vs first':>21}")
    rows = []
    for nodes in sizes:
        requests = nodes * args.per_node
        cpu, wall, gpus, reclaims = measured(nodes, requests, args.days, args.seed)
        rows.append((nodes, cpu))
        ratio = (cpu / requests) / (rows[0][1] / (sizes[0] * args.per_node))
        print(f"{nodes:6d} {gpus:6d} {requests:9,d} {reclaims:9,d} {cpu:8.1f} {wall:8.1f} {ratio:20.2f}x", flush=True)
    full_size = sizes[-1] >= FULL_NODES and args.per_node * sizes[-1] >= FULL_REQUESTS and args.days >= 30
    if full_size:
        cpu = rows[-1][1]
        print(f"\nfull size measured: {cpu:.0f} s of CPU")
    elif len(rows) >= 2:
        (n0, c0), (n1, c1) = rows[-2], rows[-1]
        exponent = math.log(c1 / c0) / math.log(n1 / n0)
        cpu = c1 * (FULL_NODES / n1) ** exponent
        print(f"\nexponent fitted between {n0} and {n1} nodes: {exponent:.2f}; "
              f"extrapolated to {FULL_NODES:,} nodes and {FULL_REQUESTS:,} requests: {cpu:.0f} s of CPU")
    else:
        print("\none size only: nothing to extrapolate (give two sizes or more)")
        return 0
    verdict = "MET" if cpu <= SPEED_TARGET_S else "NOT MET"
    how = "measured" if full_size else "extrapolated"
    print(f"replay 30 days x 50,000 requests on 1,000 nodes <= 5 min on 2 cores: {verdict} ({how}: {cpu:.0f} s, "
          f"{cpu / SPEED_TARGET_S:.2f}x the target)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

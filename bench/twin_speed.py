#!/usr/bin/env python3
"""The twin's speed curve (docs/twin.md, "Speed"): the full policy's replay of the generated month
at growing sizes, CPU seconds of one process each, the exponent fitted between the last two sizes,
and the full size (30 days x 50,000 requests on 1,000 nodes) extrapolated with it, MET / NOT MET
against 5 minutes.

Run from the repository root::

    .venv/bin/python bench/twin_speed.py                          # 50, 100, 200 nodes
    .venv/bin/python bench/twin_speed.py --nodes 100,200,400
    .venv/bin/python bench/twin_speed.py --nodes 1000             # the full size itself, measured
    .venv/bin/python bench/twin_speed.py --baseline ../before     # an earlier commit beside it

Requests scale with the nodes (``--per-node``, 50: the target's 50,000 on 1,000 nodes); each row
is ``replay(...)`` of the month exactly as ``bench/twin.py`` builds it (``Scenario``). The baseline
of the ratios is the smallest size: the cost per request against it says how far from linear the
replay grows.

``--baseline PATH``: a checkout of an earlier commit next to this one (``git worktree add ../before
<commit>``, or ``git archive <commit> | tar -x -C ../before``: the trace is read from ``../shared``
of it) that replays the same month at each size in the same run. Each replay is then a child
process of its own (the two alternate, the baseline first at every other size, so both see the
same machine), and the table sets the two side by side: CPU seconds, their ratio, and the reclaims
of each (the same decisions make the same reclaims), then each one's exponent, extrapolation and
verdict.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
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

# One replay in a child process, in the checkout it runs in (this one or the baseline): the month
# built and replayed as ``measured`` does, printed as JSON. Only names an earlier commit has too.
CHILD = """
import json, sys, time
sys.path.insert(0, ".")
from bench.twin import Scenario
from twin.clusters import installed_gpus
from twin.replay.engine import Replay
from twin.sources.generator import GeneratorSpec
nodes, requests, days, seed = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
jobs, cluster, policy = Scenario("month", nodes, GeneratorSpec(seed=seed, days=days, requests=requests)).build()
cpu, wall = time.process_time(), time.perf_counter()
outcome = Replay(jobs, cluster, policy, "full").run()
print(json.dumps([time.process_time() - cpu, time.perf_counter() - wall, installed_gpus(cluster), outcome.reclaims]))
"""


def measured(nodes: int, requests: int, days: float, seed: int) -> tuple[float, float, int, int]:
    """CPU and wall seconds of the full policy's replay, the installed GPUs and the reclaims."""
    jobs, cluster, policy = Scenario("month", nodes, GeneratorSpec(seed=seed, days=days, requests=requests)).build()
    cpu, wall = time.process_time(), time.perf_counter()
    outcome = Replay(jobs, cluster, policy, "full").run()
    return time.process_time() - cpu, time.perf_counter() - wall, installed_gpus(cluster), outcome.reclaims


def measured_in(code: Path, nodes: int, requests: int, days: float, seed: int) -> tuple[float, float, int, int]:
    """``measured`` in a child process run in the checkout ``code``."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(nodes), str(requests), str(days), str(seed)], cwd=code,
                         check=True, capture_output=True, text=True).stdout
    cpu, wall, gpus, reclaims = json.loads(out.strip().splitlines()[-1])
    return float(cpu), float(wall), int(gpus), int(reclaims)


def extrapolated(rows: list[tuple[int, float]], per_node: int, days: float, label: str) -> float | None:
    """Print the fitted exponent and the full size's CPU seconds, and the verdict (measured when
    the last row is the full size); None with one size only."""
    nodes = rows[-1][0]
    if nodes >= FULL_NODES and per_node * nodes >= FULL_REQUESTS and days >= 30:
        print(f"{label}full size measured: {rows[-1][1]:.0f} s of CPU")
        print(verdict_line(rows[-1][1], True, label))
        return rows[-1][1]
    if len(rows) < 2:
        print(f"{label}one size only: nothing to extrapolate (give two sizes or more)")
        return None
    (n0, c0), (n1, c1) = rows[-2], rows[-1]
    exponent = math.log(c1 / c0) / math.log(n1 / n0)
    cpu: float = c1 * (FULL_NODES / n1) ** exponent
    print(f"{label}exponent fitted between {n0} and {n1} nodes: {exponent:.2f}; "
          f"extrapolated to {FULL_NODES:,} nodes and {FULL_REQUESTS:,} requests: {cpu:.0f} s of CPU")
    print(verdict_line(cpu, False, label))
    return cpu


def verdict_line(cpu: float, measured_full: bool, label: str) -> str:
    verdict = "MET" if cpu <= SPEED_TARGET_S else "NOT MET"
    how = "measured" if measured_full else "extrapolated"
    return (f"{label}replay 30 days x 50,000 requests on 1,000 nodes <= 5 min on 2 cores: {verdict} ({how}: "
            f"{cpu:.0f} s, {cpu / SPEED_TARGET_S:.2f}x the target)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="50,100,200", help="comma-separated sizes, smallest first")
    ap.add_argument("--per-node", type=int, default=FULL_REQUESTS // FULL_NODES, help="requests per node")
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--baseline", help="a checkout of an earlier commit: the same replays, in the same run")
    args = ap.parse_args(argv)
    sizes = sorted(int(n) for n in args.nodes.split(",") if n)
    if args.baseline:
        return compared(args, sizes, Path(args.baseline).resolve())
    print(f"{'nodes':>6} {'GPUs':>6} {'requests':>9} {'reclaims':>9} {'CPU s':>8} {'wall s':>8} "
          f"{'CPU/request vs first':>21}")
    rows: list[tuple[int, float]] = []
    for nodes in sizes:
        requests = nodes * args.per_node
        cpu, wall, gpus, reclaims = measured(nodes, requests, args.days, args.seed)
        rows.append((nodes, cpu))
        ratio = (cpu / requests) / (rows[0][1] / (sizes[0] * args.per_node))
        print(f"{nodes:6d} {gpus:6d} {requests:9,d} {reclaims:9,d} {cpu:8.1f} {wall:8.1f} {ratio:20.2f}x", flush=True)
    print()
    extrapolated(rows, args.per_node, args.days, "")
    return 0


def compared(args: argparse.Namespace, sizes: list[int], baseline: Path) -> int:
    """Each size replayed by the baseline and by this checkout, in child processes that alternate."""
    print(f"{'nodes':>6} {'GPUs':>6} {'requests':>9} {'reclaims before':>16} {'reclaims after':>15} "
          f"{'CPU s before':>13} {'CPU s after':>12} {'after / before':>15}")
    rows: dict[str, list[tuple[int, float]]] = {"before": [], "after": []}
    same = True
    for index, nodes in enumerate(sizes):
        requests = nodes * args.per_node
        codes = [("before", baseline), ("after", REPO_ROOT)]
        seen = {label: measured_in(code, nodes, requests, args.days, args.seed)
                for label, code in (codes if index % 2 == 0 else codes[::-1])}
        (cpu0, _, gpus, rec0), (cpu1, _, _, rec1) = seen["before"], seen["after"]
        rows["before"].append((nodes, cpu0))
        rows["after"].append((nodes, cpu1))
        same = same and rec0 == rec1
        print(f"{nodes:6d} {gpus:6d} {requests:9,d} {rec0:16,d} {rec1:15,d} {cpu0:13.1f} {cpu1:12.1f} "
              f"{cpu1 / cpu0:14.2f}x", flush=True)
    print("\nthe same reclaims before and after" if same else "\nTHE RECLAIMS DIFFER: the decisions changed")
    for label in ("before", "after"):
        extrapolated(rows[label], args.per_node, args.days, f"{label}: ")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""What booking ahead costs the twin (docs/twin.md, "Booking ahead", "What it costs"): the full
policy's replay of the generated month, as ``bench/twin.py`` builds it, once as generated (no
request asks a later start: the baseline, in the same run) and once with a share of its requests
given a start half an hour to five and a half hours after their submission (seeded), CPU seconds
of one process each and their ratio, at each size.

Run from the repository root::

    .venv/bin/python bench/twin_ahead.py                      # 12 and 50 nodes, a tenth ahead
    .venv/bin/python bench/twin_ahead.py --nodes 12 --share 0.25

There is no target: the generated months and the Alibaba trace ask no later start, so the speed
target (``bench/twin_speed.py``) is not concerned; this says what a history rich in bookings ahead
costs a what-if.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.twin import Scenario  # noqa: E402
from placement import Node  # noqa: E402
from twin.policy import Policy  # noqa: E402
from twin.replay.engine import Replay  # noqa: E402
from twin.sources.generator import GeneratorSpec  # noqa: E402
from twin.workload import Job  # noqa: E402

HALF_HOUR = 1800.0


def ahead(jobs: list[Job], share: float, seed: int) -> list[Job]:
    """``jobs`` with ``share`` of them (drawn with ``seed``) asking a start 1 to 11 half hours later."""
    rng = random.Random(seed)
    return [replace(job, starts_at=job.submit_at + rng.randrange(1, 12) * HALF_HOUR) if rng.random() < share else job
            for job in jobs]


def replayed(jobs: list[Job], nodes: list[Node], policy: Policy) -> tuple[float, int, int]:
    """CPU seconds of the full policy's replay, its reclaims and the requests that started."""
    began = time.process_time()
    outcome = Replay(jobs, nodes, policy, "full").run()
    started = sum(1 for record in outcome.records if record.first_start is not None)
    return time.process_time() - began, outcome.reclaims, started


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="12,50", help="comma-separated sizes")
    ap.add_argument("--per-node", type=int, default=50, help="requests per node (bench/twin_speed.py's)")
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--share", type=float, default=0.1, help="the share of requests asking a later start")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if not 0.0 <= args.share <= 1.0:
        ap.error("--share must be within 0 and 1")
    print(f"{'nodes':>5} {'requests':>8} {'plain CPU s':>11} {'ahead CPU s':>11} {'ratio':>6} "
          f"{'reclaims':>15} {'started':>15}")
    for nodes in (int(size) for size in args.nodes.split(",")):
        spec = GeneratorSpec(seed=args.seed, days=args.days, requests=nodes * args.per_node)
        jobs, cluster, policy = Scenario("month", nodes, spec).build()
        plain = replayed(jobs, cluster, policy)
        booked = replayed(ahead(jobs, args.share, args.seed + 6), cluster, policy)
        print(f"{nodes:>5} {len(jobs):>8} {plain[0]:>11.1f} {booked[0]:>11.1f} {booked[0] / plain[0]:>5.1f}x "
              f"{plain[1]:>7} / {booked[1]:<5} {plain[2]:>7} / {booked[2]:<5}", flush=True)
    print(f"(no target: {args.share:.0%} of the requests booked ahead; docs/twin.md, 'What it costs')")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

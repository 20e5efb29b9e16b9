#!/usr/bin/env python3
"""Benchmark (not a timed test): a what-if on the demo's history, as ``make run`` answers it.

    .venv/bin/python bench/what_if.py [--days 7] [--repeat 3]

Seeds the demo (``manage.py demo_prepare``, as ``make run`` does) on a throw-away SQLite database,
then asks for the what-if of docs/twin.md's example, "raise nlp's limit by 4 for the last --days"
(``whatifs.services.what_if_create``; tasks run in-process, as on ``make run``, so the run follows
the commit: the history read from the database, the twin's full policy replayed under the current
and the proposed quotas, the result stored). Baseline in
the same run: one replay of the same demand under the current policy alone (the twin's own cost,
no database), so the ratio says what reading the database and storing the result add. Target
(issue 32): a what-if on the demo's history answers in <= 60 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_S = 60.0


def setup_django(work: Path) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "gpuportal.settings"
    os.environ["DATABASE_URL"] = f"sqlite:///{work / 'bench.sqlite3'}"
    os.environ["GPUPORTAL_DEBUG"] = "true"
    os.environ["GPUPORTAL_VAR_DIR"] = str(work)
    os.environ["GPUPORTAL_MANIFESTS_DIR"] = str(work / "manifests")
    os.environ.pop("CELERY_BROKER_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("demo_prepare", verbosity=0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        began = time.perf_counter()
        setup_django(Path(folder))
        print(f"demo seeded in {time.perf_counter() - began:.1f} s")
        from django.contrib.auth.models import User

        from kernel.clock import clock_now
        from twin.replay.engine import replay
        from whatifs.models import WhatIf
        from whatifs.services import what_if_create, what_if_run
        from whatifs.sources import history_workload, inventory_nodes, live_policy

        bob = User.objects.get(username="bob")
        jobs, nodes, policy = history_workload(days=args.days, now=clock_now()), inventory_nodes(), live_policy()
        baseline, runs = [], []
        for _ in range(args.repeat):
            start = time.perf_counter()
            replay(jobs, nodes, policy, "full", horizon=86400.0 * args.days)
            baseline.append(time.perf_counter() - start)
            start = time.perf_counter()  # tasks in-process, as on make run: the run follows the commit
            asked = what_if_create(actor=bob, changes=[{"kind": "quota", "department": "nlp", "limit_delta": 4}],
                                   history_days=args.days)
            what_if_run(what_if_id=asked.pk)  # nothing left to do when the task ran in-process
            runs.append(time.perf_counter() - start)
            done = WhatIf.objects.get(pk=asked.pk)
            assert done.state == "done", done.error
        print(f"{len(jobs)} requests of the last {args.days} days on {len(nodes)} nodes "
              f"({sum(len(n.gpus) for n in nodes)} GPUs)")
        both = what_if_create(actor=User.objects.get(username="admin"), history_days=args.days,
                              changes=[{"kind": "quota", "department": name, "limit_delta": 4} for name in ("nlp", "acme")])
        for title, what_if in (("nlp by 4", done), ("nlp and its parent acme by 4", WhatIf.objects.get(pk=both.pk))):
            what_if_run(what_if_id=what_if.pk)
            what_if.refresh_from_db()
            nlp = next(row for row in what_if.result["departments"] if row["department"] == "nlp")
            print(f"raise {title}: nlp wait p95 current {nlp['current']['wait_p95_min']} min, "
                  f"proposed {nlp['proposed']['wait_p95_min']} min")
        what_if_s, replay_s = statistics.median(runs), statistics.median(baseline)
        print(f"what-if (two replays, read and stored): median {what_if_s:.3f} s of {args.repeat}; "
              f"one replay alone {replay_s:.3f} s; ratio {what_if_s / replay_s if replay_s else float('inf'):.1f}x")
        print(f"target: a what-if on the demo's history answers in <= {TARGET_S:.0f} s: "
              f"{'MET' if what_if_s <= TARGET_S else 'NOT MET'} ({what_if_s:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

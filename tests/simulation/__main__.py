"""``python -m tests.simulation --seed N --steps K``: the simulator outside the suite, on the test
database the suite would use (pytest-django creates and migrates it). Options go to the pytest run
as GPUPORTAL_SIM_* variables; see docs/simulation.md."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

MUTATIONS = ("count-non-overlapping", "skip-edge-reclaim", "drop-notice", "double-book-slice", "reclaim-beneficiary")
TEST = "tests/simulation/test_simulation.py::"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation", description=__doc__)
    parser.add_argument("--seed", help="one seed (same as --seeds N)")
    parser.add_argument("--seeds", default="1-20", help="seeds: 1-20, 7, 3,9,12-14 (default 1-20)")
    parser.add_argument("--steps", type=int, default=300, help="steps per seed (default 300)")
    parser.add_argument("--only", default="", help="replay only these action indices (a shrunk sequence)")
    parser.add_argument("--mutation", default="", help="break the code on purpose: count-non-overlapping, "
                        "skip-edge-reclaim, drop-notice, double-book-slice, reclaim-beneficiary, or all")
    parser.add_argument("--shrink-seconds", type=float, default=180.0, help="time to shrink a failure (0: do not)")
    parser.add_argument("--ignore", default="", help="invariants not to check, comma-separated")
    parser.add_argument("--probe-every", type=int, default=50, help="steps between the HTTP probes")
    parser.add_argument("--minutes", type=float, default=0.0,
                        help="start no seed after this many minutes (default 0: run every seed)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="processes, each on its own test database, sharing the seeds (default 1)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs: at least 1")
    if args.minutes < 0:
        parser.error("--minutes: 0 or more")
    os.environ.update({
        "GPUPORTAL_SIM_SEEDS": args.seed or args.seeds, "GPUPORTAL_SIM_STEPS": str(args.steps),
        "GPUPORTAL_SIM_ONLY": args.only, "GPUPORTAL_SIM_SHRINK_SECONDS": str(args.shrink_seconds),
        "GPUPORTAL_SIM_IGNORE": args.ignore, "GPUPORTAL_SIM_PROBE_EVERY": str(args.probe_every),
        "GPUPORTAL_SIM_MINUTES": str(args.minutes),
    })
    names = list(MUTATIONS) if args.mutation == "all" else [args.mutation] if args.mutation else []
    if any(name not in MUTATIONS for name in names):
        parser.error(f"--mutation: one of {', '.join(MUTATIONS)}, or all")
    if names:
        return max(_pytest("test_the_mutation_is_caught_within_the_budget", mutation=name) for name in names)
    if args.jobs > 1:
        if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
            parser.error("--jobs: needs DATABASE_URL on PostgreSQL (each process gets its own database)")
        return _in_parallel(args.jobs, args.seed or args.seeds)
    return _pytest("test_every_invariant_holds_over_the_simulated_budget", mutation="")


def _pytest(test: str, *, mutation: str) -> int:
    """One pytest run (its own process: pytest-django sets Django up once per process)."""
    env = {**os.environ, "GPUPORTAL_SIM_MUTATION": mutation}
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", TEST + test]
    return subprocess.run(command, env=env, check=False).returncode  # noqa: S603 - our own interpreter and test


def _in_parallel(jobs: int, seeds: str) -> int:
    """The seeds dealt out to ``jobs`` pytest processes, each on its own database (the name given a
    suffix), run at once; then one summary of them all."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuportal.settings_test")  # as pytest's configuration
    django.setup()
    from tests.simulation.report import Summary
    from tests.simulation.session import seeds_parse

    every = seeds_parse(seeds)
    shares = [every[index::jobs] for index in range(jobs) if every[index::jobs]]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="simulation-") as folder:
        running = []
        for index, share in enumerate(shares):
            env = {**os.environ, "GPUPORTAL_SIM_SEEDS": ",".join(map(str, share)),
                   "GPUPORTAL_SIM_SUMMARY_FILE": str(Path(folder) / f"job{index}.json"), "GPUPORTAL_SIM_MUTATION": ""}
            for name in ("DATABASE_URL", "GPUPORTAL_APP_DATABASE_URL"):
                if env.get(name):
                    env[name] = _database_renamed(env[name], f"_sim{index}")
            command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                       TEST + "test_every_invariant_holds_over_the_simulated_budget"]
            running.append(subprocess.Popen(command, env=env))  # noqa: S603 - our own interpreter and test
        codes = [process.wait() for process in running]
        summary = Summary(jobs=len(shares))
        for index in range(len(shares)):
            written = Path(folder) / f"job{index}.json"
            if written.exists():
                summary.merge_json(written.read_text(encoding="utf-8"))
    summary.wall_seconds = time.monotonic() - started
    sys.stdout.write("\nall processes together:\n" + summary.text() + "\n")
    return max(codes)


def _database_renamed(url: str, suffix: str) -> str:
    parts = urlparse(url)
    return parts._replace(path=parts.path + suffix).geturl()


if __name__ == "__main__":
    sys.exit(main())

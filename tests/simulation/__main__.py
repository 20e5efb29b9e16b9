"""``python -m tests.simulation --seed N --steps K``: the simulator outside the suite, on the test
database the suite would use (pytest-django creates and migrates it). Options go to the pytest run
as GPUPORTAL_SIM_* variables; see docs/simulation.md."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

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
    args = parser.parse_args(argv)
    os.environ.update({
        "GPUPORTAL_SIM_SEEDS": args.seed or args.seeds, "GPUPORTAL_SIM_STEPS": str(args.steps),
        "GPUPORTAL_SIM_ONLY": args.only, "GPUPORTAL_SIM_SHRINK_SECONDS": str(args.shrink_seconds),
        "GPUPORTAL_SIM_IGNORE": args.ignore, "GPUPORTAL_SIM_PROBE_EVERY": str(args.probe_every),
    })
    names = list(MUTATIONS) if args.mutation == "all" else [args.mutation] if args.mutation else []
    if any(name not in MUTATIONS for name in names):
        parser.error(f"--mutation: one of {', '.join(MUTATIONS)}, or all")
    if not names:
        return _pytest("test_every_invariant_holds_over_the_simulated_budget", mutation="")
    return max(_pytest("test_the_mutation_is_caught_within_the_budget", mutation=name) for name in names)


def _pytest(test: str, *, mutation: str) -> int:
    """One pytest run (its own process: pytest-django sets Django up once per process)."""
    env = {**os.environ, "GPUPORTAL_SIM_MUTATION": mutation}
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", TEST + test]
    return subprocess.run(command, env=env, check=False).returncode  # noqa: S603 - our own interpreter and test


if __name__ == "__main__":
    sys.exit(main())

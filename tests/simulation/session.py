"""Runs of many seeds, as the suite and ``python -m tests.simulation`` ask for them: the plain
budget (every invariant; a failing seed is shrunk and printed with its replay command), one
sequence replayed (``only``), or a mutation (the code broken on purpose; only the invariant that
must catch it is watched, and the run stops at the seed that does)."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

from django.db import connection

from tests.simulation.faults import faults_installed
from tests.simulation.mutations import MUTATIONS, mutated
from tests.simulation.probes import requests_made
from tests.simulation.report import Summary, failure_text
from tests.simulation.runner import run_seed
from tests.simulation.shrink import shrink

INVARIANTS = frozenset({
    "escaped-exception", "capacity", "booking-leak", "booking-count", "quota-over-limit", "reclaim-notice",
    "reclaim-beneficiary", "reclaim-within-guarantee", "reclaim-reason", "reclaim-units", "shrink-reclaim-met",
    "reclaim-deadline",
    "expiry", "start", "window-edge", "audit-once", "preview-approve", "why-approve", "displayed-in-use", "http-5xx", "audit-verifies",
})


@dataclass(frozen=True)
class Options:
    seeds: list[int]
    steps: int
    only: list[int] | None = None
    mutation: str = ""
    shrink_seconds: float = 180.0
    ignore: frozenset[str] = frozenset()
    probe_every: int = 50
    minutes: float = 0.0
    """Start no seed after this many minutes (0: no limit); the summary says how many ran."""
    summary_file: str = ""
    """Where to write the summary as JSON too (``--jobs`` merges its processes' files)."""

    @classmethod
    def from_environment(cls) -> Options:
        env = os.environ.get
        only = env("GPUPORTAL_SIM_ONLY")
        return cls(
            seeds=seeds_parse(env("GPUPORTAL_SIM_SEEDS", "1-20")), steps=int(env("GPUPORTAL_SIM_STEPS", "300")),
            only=[int(part) for part in only.split(",") if part] if only else None,
            mutation=env("GPUPORTAL_SIM_MUTATION", ""), shrink_seconds=float(env("GPUPORTAL_SIM_SHRINK_SECONDS", "180")),
            ignore=frozenset(filter(None, env("GPUPORTAL_SIM_IGNORE", "").split(","))),
            probe_every=int(env("GPUPORTAL_SIM_PROBE_EVERY", "50")),
            minutes=float(env("GPUPORTAL_SIM_MINUTES", "0")), summary_file=env("GPUPORTAL_SIM_SUMMARY_FILE", ""),
        )


def seeds_parse(text: str) -> list[int]:
    """``1-20``, ``7``, ``3,9,12-14``."""
    seeds: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        seeds += range(int(first), int(last or first) + 1)
    return seeds


def simulate(options: Options) -> tuple[Summary, list[str]]:
    """Every seed (until ``options.minutes`` ran out); returns the summary and a report per failing
    seed (the first one shrunk). Each seed's end is printed to stderr as it comes, so a long run
    shows how far it is."""
    summary = Summary(planned_seeds=len(options.seeds))
    reports: list[str] = []
    started = time.monotonic()
    deadlocks_before, requests_before = _database_deadlocks(), requests_made[0]
    with faults_installed() as faults:
        for seed in options.seeds:
            if options.minutes and time.monotonic() - started >= options.minutes * 60:
                break
            result = run_seed(seed, options.steps, keep=options.only, faults=faults, ignore=options.ignore,
                              probe_every=options.probe_every)
            summary.add(result)
            failure = result.failure
            _progress(seed, result.steps, sum(result.step_seconds), failure.invariant if failure else "")
            if failure is None:
                continue
            shrunk = None
            tried = options.only is None and not reports and options.shrink_seconds > 0
            if tried:
                shrunk, _ = shrink(failure, faults=faults, ignore=options.ignore, budget_seconds=options.shrink_seconds)
            reports.append(failure_text(failure, options.steps, shrunk, shrinking_tried=tried))
    time.sleep(1)  # PostgreSQL publishes its statistics within a second of a transaction's end
    summary.database_deadlocks = _database_deadlocks() - deadlocks_before
    summary.http_requests = requests_made[0] - requests_before
    summary.wall_seconds = time.monotonic() - started
    if options.summary_file:
        with open(options.summary_file, "w", encoding="utf-8") as out:
            out.write(summary.to_json())
    return summary, reports


def _progress(seed: int, steps: int, seconds: float, invariant: str) -> None:
    verdict = f"VIOLATED {invariant}" if invariant else "ok"
    sys.stderr.write(f"simulation: seed {seed}, {steps} steps in {seconds:.0f} s: {verdict}\n")
    sys.stderr.flush()


def _database_deadlocks() -> int:
    """The deadlocks PostgreSQL detected in this database so far (real ones: the simulator's
    injected deadlock victims never reach the server)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def mutation_check(options: Options) -> tuple[Summary, str | None]:
    """Run the seeds with the code broken as ``options.mutation`` says until one breaks the
    invariant that must catch it; the report of that seed, or None when none did."""
    expected = MUTATIONS[options.mutation][0]
    ignore = INVARIANTS - {expected}
    summary = Summary()
    with faults_installed() as faults, mutated(options.mutation):
        for seed in options.seeds:
            result = run_seed(seed, options.steps, keep=options.only, faults=faults, ignore=ignore,
                              probe_every=options.probe_every)
            summary.add(result)
            if result.failure is not None:
                shrunk = None
                tried = options.shrink_seconds > 0
                if tried:
                    shrunk, _ = shrink(result.failure, faults=faults, ignore=ignore,
                                       budget_seconds=options.shrink_seconds)
                caught = (f"mutation {options.mutation} caught by {expected} at seed {seed}, step "
                          f"{result.failure.step}, after {summary.steps} steps in all\n")
                return summary, caught + failure_text(result.failure, options.steps, shrunk, options.mutation,
                                                      shrinking_tried=tried)
    return summary, None

"""Delta debugging (Zeller's ddmin) over a failing run's actions: replay subsets of the actions up
to the failing step, each from a fresh database, and keep the smallest subset that still breaks
the same invariant. Removing chunks, then halving the chunks, until no single action can go or the
time budget is spent (the best subset so far is returned)."""

from __future__ import annotations

import time

from tests.simulation.faults import Faults
from tests.simulation.runner import Failure, run_seed

PROBED = ("displayed-in-use", "http-5xx")


def reproduces(failure: Failure, keep: list[int], *, faults: Faults, ignore: frozenset[str]) -> bool:
    result = run_seed(
        failure.seed, failure.step + 1, keep=keep, faults=faults, ignore=ignore,
        probe_every=1 if failure.invariant in PROBED else 0, verify_audit=failure.invariant == "audit-verifies",
    )
    return result.failure is not None and result.failure.invariant == failure.invariant


def shrink(failure: Failure, *, faults: Faults, ignore: frozenset[str] = frozenset(),
           budget_seconds: float = 180.0) -> tuple[list[int] | None, int]:
    """The smallest list of action indices found that still fails (None: the whole run did not
    fail again, as a race between concurrent actors may not), and how many replays it took."""
    deadline = time.monotonic() + budget_seconds
    items = list(range(failure.step + 1))
    replays = 1
    if not reproduces(failure, items, faults=faults, ignore=ignore):
        return None, replays
    chunks = 2
    while len(items) >= 2 and time.monotonic() < deadline:
        size = -(-len(items) // chunks)
        parts = [items[start:start + size] for start in range(0, len(items), size)]
        reduced = False
        for part in parts:
            if time.monotonic() >= deadline:
                break
            rest = [index for index in items if index not in part]
            replays += 1
            if rest and reproduces(failure, rest, faults=faults, ignore=ignore):
                items, chunks, reduced = rest, max(chunks - 1, 2), True
                break
        if not reduced:
            if chunks >= len(items):
                break
            chunks = min(len(items), chunks * 2)
    return items, replays

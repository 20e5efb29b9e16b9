"""``--wait``: follow a request through approval and provisioning by polling it with backoff.

A request settles when it is active (granted and on the cluster), scheduled (granted for a later
start: nothing more happens until then), or ends without a grant (rejected, cancelled, failed,
expired, released, reclaimed). Each change of state is reported as it is seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cli.client import Api
from cli.exits import CliError, Exit

GRANTED = frozenset({"active", "scheduled"})
IN_FLIGHT = frozenset({"pending", "approved", "provisioning"})
FIRST_DELAY, GROWTH, MAX_DELAY = 1.0, 1.5, 15.0

WHAT_NEXT = {
    "pending": "waiting for a department admin's decision",
    "approved": "approved; waiting for provisioning",
    "provisioning": "being pushed to the cluster",
    "active": "the GPUs are yours",
    "scheduled": "approved for a later start; it becomes active then",
    "rejected": "rejected",
    "cancelled": "cancelled",
    "failed": "provisioning failed",
}


@dataclass
class Outcome:
    allocation: dict[str, Any]
    code: Exit


def describe(allocation: dict[str, Any]) -> str:
    state = str(allocation.get("state"))
    text = WHAT_NEXT.get(state, f"ended as {state}")
    if state == "scheduled":
        text += f" ({allocation.get('starts_at')})"
    extra = allocation.get("decision_comment") if state == "rejected" else allocation.get("failure_reason")
    if state in ("rejected", "failed") and extra:
        text += f": {extra}"
    if allocation.get("decided_by") and state in ("approved", "scheduled", "rejected"):
        text += f" (by {allocation['decided_by']})"
    return text


@dataclass(frozen=True)
class Timer:
    """How a wait passes time and reads it (tests pass their own)."""

    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic


def allocation_wait(
    api: Api,
    allocation: dict[str, Any],
    *,
    timeout: float,
    report: Callable[[str, dict[str, Any]], None],
    warn: Callable[[str], None] = lambda _message: None,
    timer: Timer = Timer(),
) -> Outcome:
    """Poll ``allocation`` until it settles or ``timeout`` seconds pass; ``report`` sees each new state.

    A portal that cannot be reached or answers 5xx is asked again (``warn`` hears why) until the
    timeout: a restart of the portal must not end a long wait. Any other refusal ends it."""
    sleep, clock = timer.sleep, timer.clock
    deadline = clock() + timeout
    delay = FIRST_DELAY
    seen = str(allocation.get("state"))
    report(seen, allocation)
    while True:
        if seen in GRANTED:
            return Outcome(allocation, Exit.OK)
        if seen not in IN_FLIGHT:
            return Outcome(allocation, Exit.NOT_GRANTED)
        left = deadline - clock()
        if left <= 0:
            return Outcome(allocation, Exit.TIMEOUT)
        sleep(min(delay, left))
        delay = min(delay * GROWTH, MAX_DELAY)
        try:
            allocation = api.get(f"allocations/{allocation['id']}/")
        except CliError as error:
            if not error.transient:
                raise
            warn(f"{error.message}; asking again")
            continue
        state = str(allocation.get("state"))
        if state != seen:
            seen = state
            report(seen, allocation)
            delay = FIRST_DELAY  # things are moving: look again soon

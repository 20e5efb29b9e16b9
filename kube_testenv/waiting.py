"""Polling with a deadline, the one synchronisation tool tests need here."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A condition did not hold in time (an AssertionError so pytest shows it plainly)."""


def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.1,
    what: str = "condition",
    fatal: tuple[type[Exception], ...] = (),
) -> T:
    """Call *probe* until it returns something other than None/False; return that.

    The last exception *probe* raised (if any) is chained to the timeout error,
    which is usually the most useful clue; exceptions of a *fatal* type end the
    wait at once.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = probe()
        except fatal:
            raise
        except Exception as exc:  # noqa: BLE001 - probes report transient errors
            last_error = exc
            result = None
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}") from last_error
        time.sleep(interval)

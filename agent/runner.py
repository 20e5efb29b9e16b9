"""The agent's main loop: collect every interval, deliver when the outbox says so, sleep between."""

from __future__ import annotations

import logging
from collections.abc import Callable

from agent.outbox import Outbox
from agent.portal_client import Outcome
from agent.report import AgentReport

logger = logging.getLogger(__name__)


def run_loop(
    *,
    collect: Callable[[int], AgentReport],
    outbox: Outbox,
    interval_seconds: float,
    clock: Callable[[], float],
    wait: Callable[[float], object],
    should_stop: Callable[[], bool],
) -> None:
    """Run until ``should_stop``; ``wait`` sleeps (or returns early when asked to stop).

    Collection keeps its own rhythm while deliveries fail: a report collected during a backoff
    replaces the pending one, so what reaches the portal after an outage is the newest state.
    """
    sequence = 0
    next_collection = clock()
    while not should_stop():
        now = clock()
        if now >= next_collection:
            report = _collect(collect, sequence)
            if report is not None:
                outbox.submit(report)
            sequence += 1
            next_collection += interval_seconds
            if next_collection <= now:  # collection overran the interval, or the clock jumped
                next_collection = now + interval_seconds
        due_in = outbox.seconds_until_attempt()
        if due_in is not None and due_in <= 0:
            result = outbox.attempt()
            if result is not None and result.outcome is Outcome.DELIVERED:
                logger.debug("report delivered (%s)", result.detail)
            due_in = outbox.seconds_until_attempt()
        until_collection = next_collection - clock()
        wait(max(0.0, until_collection if due_in is None else min(until_collection, due_in)))


def _collect(collect: Callable[[int], AgentReport], sequence: int) -> AgentReport | None:
    try:
        return collect(sequence)
    except Exception:  # keep the DaemonSet alive; the next interval tries again
        logger.exception("collecting report %d failed", sequence)
        return None

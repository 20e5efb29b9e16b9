"""Where collected reports go: the portal (newest report only, with backoff) or stdout."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Protocol, TextIO

from agent.backoff import Backoff
from agent.portal_client import DeliveryResult, Outcome
from agent.report import AgentReport

logger = logging.getLogger(__name__)


class ReportPoster(Protocol):
    def post_report(self, body: bytes) -> DeliveryResult: ...


class Outbox(Protocol):
    def submit(self, report: AgentReport) -> None: ...

    def seconds_until_attempt(self) -> float | None:
        """None when there is nothing to send, else how long until the next attempt is due."""
        ...

    def attempt(self) -> DeliveryResult | None: ...


def encode_report(report: AgentReport, *, pretty: bool = False) -> bytes:
    if pretty:
        return (json.dumps(report, indent=2) + "\n").encode("utf-8")
    return json.dumps(report, separators=(",", ":")).encode("utf-8")


class PortalOutbox:
    """Holds at most one report, the newest, and delivers it with backoff.

    A report is a complete snapshot, so when the portal has been unreachable for a while only the
    latest one is worth sending: an older pending report is replaced, not queued, and the count of
    reports that never arrived goes out with the next one as ``undelivered_reports``.
    """

    def __init__(self, poster: ReportPoster, backoff: Backoff, clock: Callable[[], float] = time.monotonic) -> None:
        self._poster = poster
        self._backoff = backoff
        self._clock = clock
        self._pending: AgentReport | None = None
        self._undelivered = 0
        self._next_attempt_at = clock()

    @property
    def pending(self) -> AgentReport | None:
        return self._pending

    @property
    def undelivered(self) -> int:
        return self._undelivered

    def submit(self, report: AgentReport) -> None:
        if self._pending is not None:
            self._undelivered += 1
        self._pending = report

    def seconds_until_attempt(self) -> float | None:
        if self._pending is None:
            return None
        return max(0.0, self._next_attempt_at - self._clock())

    def attempt(self) -> DeliveryResult | None:
        """Send the pending report now, whatever the schedule says."""
        if self._pending is None:
            return None
        report = self._pending.copy()
        report["undelivered_reports"] = self._undelivered
        result = self._poster.post_report(encode_report(report))
        now = self._clock()
        if result.outcome is Outcome.DELIVERED:
            self._pending = None
            self._undelivered = 0
            self._backoff.reset()
            self._next_attempt_at = now
            return result
        delay = self._backoff.next_delay()
        if result.retry_after_seconds is not None:
            delay = max(delay, min(result.retry_after_seconds, self._backoff.maximum))
        self._next_attempt_at = now + delay
        if result.outcome is Outcome.REJECTED:
            self._pending = None
            self._undelivered += 1
        logger.warning(
            "report %d not delivered (%s: %s); next attempt in %.1fs",
            report["sequence"],
            result.outcome.value,
            result.detail,
            delay,
        )
        return result


class PrintingOutbox:
    """``--dry-run``: writes each report to stdout as JSON instead of sending it."""

    def __init__(self, stream: TextIO | None = None, *, pretty: bool = True) -> None:
        self._stream = stream
        self._pretty = pretty

    def submit(self, report: AgentReport) -> None:
        stream = self._stream or sys.stdout
        stream.write(encode_report(report, pretty=self._pretty).decode("utf-8"))
        if not self._pretty:
            stream.write("\n")
        stream.flush()

    def seconds_until_attempt(self) -> float | None:
        return None

    def attempt(self) -> DeliveryResult | None:
        return None

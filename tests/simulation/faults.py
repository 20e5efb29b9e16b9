"""Faults the simulator injects into the real code, through two hooks installed for a run:

* ``kill``: the k-th audit event the action writes raises :class:`SimulatedCrash` inside its
  transaction (every state change writes its event in the transaction of the change), so that
  transaction rolls back as if the process died there; the transactions the action committed
  before stay committed, as they would;
* ``deadlock``: the k-th audit event raises the ``OperationalError`` PostgreSQL raises for its
  deadlock victim (SQLSTATE 40P01), once: a service that opens its own transaction runs it again;
* ``push``: the manifests driver fails the next k applies (``DriverError``), as a cluster that
  cannot be written.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import OperationalError

import audit.services
from delivery.drivers import DriverError
from delivery.drivers.manifests import ManifestsDriver

RETRY_MODULE = "kernel/transactions.py"


class SimulatedCrash(Exception):
    """A process killed mid-transaction (the simulator's own fault)."""


class _DeadlockCause(Exception):
    sqlstate = "40P01"


def _in_retrying_transaction() -> bool:
    """Whether the caller runs inside a transaction ``kernel.transactions.retry_on_deadlock`` opened."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "run" and frame.f_code.co_filename.endswith(RETRY_MODULE):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class Faults:
    """The armed fault, if any, and how many were injected (the run's summary)."""

    def __init__(self) -> None:
        self.mode = ""
        self.countdown = 0
        self.push_failures = 0
        self.injected: dict[str, int] = {"kill": 0, "deadlock": 0, "push": 0}
        self._lock = threading.Lock()
        self._originals: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        append = audit.services._append_in_database
        apply = ManifestsDriver.apply
        faults = self

        def append_hooked(*args: Any, **kwargs: Any) -> Any:
            faults._maybe_fail()
            return append(*args, **kwargs)

        def apply_hooked(driver: ManifestsDriver, plan: Any) -> Any:
            with faults._lock:
                failing = faults.push_failures > 0
                if failing:
                    faults.push_failures -= 1
                    faults.injected["push"] += 1
            if failing:
                raise DriverError("the cluster refused the write (simulated push failure)")
            return apply(driver, plan)

        self._originals = [(audit.services, "_append_in_database", append), (ManifestsDriver, "apply", apply)]
        setattr(audit.services, "_append_in_database", append_hooked)  # noqa: B010 - a test hook
        setattr(ManifestsDriver, "apply", apply_hooked)  # noqa: B010 - a test hook

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._originals):
            setattr(owner, name, original)
        self._originals = []

    def _maybe_fail(self) -> None:
        with self._lock:
            if not self.mode:
                return
            if self.mode == "deadlock" and not _in_retrying_transaction():
                return  # PostgreSQL picks its victims among transactions that wait for rows: the retrying ones
            self.countdown -= 1
            if self.countdown > 0:
                return
            mode, self.mode = self.mode, ""
            self.injected[mode] += 1
        if mode == "kill":
            raise SimulatedCrash("the process was killed mid-transaction (simulated)")
        error = OperationalError("deadlock detected (simulated deadlock victim)")
        error.__cause__ = _DeadlockCause()
        raise error

    @contextmanager
    def armed(self, mode: str, k: int) -> Iterator[None]:
        """Arm ``mode`` (kill, deadlock or push) for the block; disarmed after it whatever happened."""
        with self._lock:
            if mode == "push":
                self.push_failures = k
            else:
                self.mode, self.countdown = mode, k
        try:
            yield
        finally:
            with self._lock:
                self.mode, self.countdown, self.push_failures = "", 0, 0


def _waits(*args: Any, **kwargs: Any) -> bool:
    """A hand-over to Celery that does not happen: the row waits for its dispatcher."""
    del args, kwargs
    return False


QUIET = ("celery.app.trace", "gpuportal.access", "delivery.outbox", "delivery.services", "clusters.outbox")


@contextmanager
def faults_installed() -> Iterator[Faults]:
    """The fault hooks, and the hand-overs that a run drives itself: a cluster push waits for the
    simulator's sweep (the worker: ``executor_more.push_sweep``) instead of running inside the
    commit that queued it, and notifications wait for a dispatcher that never comes (they move no
    capacity). The chattiest loggers say only warnings."""
    import clusters.outbox
    import delivery.tasks
    import notifications.outbox

    faults = Faults()
    faults.install()
    patched = [(clusters.outbox, "push_dispatch"), (delivery.tasks, "push_dispatch"), (notifications.outbox, "task_send")]
    originals = [getattr(owner, name) for owner, name in patched]
    for owner, name in patched:
        setattr(owner, name, _waits)
    levels = {name: logging.getLogger(name).level for name in QUIET}
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        yield faults
    finally:
        for (owner, name), original in zip(patched, originals, strict=True):
            setattr(owner, name, original)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        faults.uninstall()

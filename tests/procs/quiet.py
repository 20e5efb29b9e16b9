"""Waiting for quiescence after the clients stopped: every push delivered, no approved grant still
on its way. While it waits it does what beat would do every few seconds (``pushes_dispatch``:
pushes the broker did not get), through the run's broker and queue rather than in this process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from allocations.models import Allocation, AllocationState
from clusters.models import ClusterPush, PushState
from clusters.outbox import pushes_dispatch

POLLS = 240
POLL_SECONDS = 0.5
DISPATCH_EVERY = 10
"""Polls between two re-dispatches (beat's sweep, about every five seconds)."""


@dataclass(frozen=True)
class Quiet:
    settled: bool
    polls: int
    redispatched: int
    pending: int
    on_the_way: int

    def __str__(self) -> str:
        return (f"quiescence {'reached' if self.settled else 'NOT reached'} after {self.polls} polls, "
                f"{self.redispatched} pushes re-dispatched, {self.pending} pending, {self.on_the_way} grants on their way")


@contextmanager
def publishing(*, broker_url: str, queue: str) -> Iterator[None]:
    """This process's Celery app publishing to the run's broker and queue for a moment."""
    from gpuportal.celery import app
    from tests.clusters.test_worker_delivery import _reset_connections

    saved = {key: app.conf[key] for key in ("task_always_eager", "broker_url", "task_default_queue")}
    app.conf.update(task_always_eager=False, broker_url=broker_url, task_default_queue=queue)
    _reset_connections(app)
    try:
        yield
    finally:
        app.conf.update(saved)
        _reset_connections(app)


def quiescence_wait(*, broker_url: str, queue: str) -> Quiet:
    redispatched = pending = on_the_way = 0
    for poll in range(1, POLLS + 1):
        pending = ClusterPush.objects.filter(state=PushState.PENDING).count()
        on_the_way = Allocation.objects.filter(state__in=[AllocationState.APPROVED, AllocationState.PROVISIONING]).count()
        if not pending and not on_the_way:
            return Quiet(True, poll, redispatched, 0, 0)
        if poll % DISPATCH_EVERY == 0:
            with publishing(broker_url=broker_url, queue=queue):
                redispatched += pushes_dispatch()
        time.sleep(POLL_SECONDS)
    return Quiet(False, POLLS, redispatched, pending, on_the_way)

"""The transactional outbox of cluster pushes: the side that sits below allocations.

``push_enqueue`` writes a :class:`ClusterPush` row in the caller's transaction and, once that
commits, hands it to the delivery worker. If the broker is down at that moment the row simply
waits: ``pushes_dispatch`` (Celery beat) hands every due row to a worker again. The worker's side
(claim, push, record the outcome) lives in :mod:`delivery.outbox`, above allocations; this module
knows the delivery task only by its name, so nothing here imports upward.

With in-process tasks (the embedded default) there is no beat: :class:`PushSweeper`, started by the
WSGI entry point, runs ``pushes_dispatch`` every ``SWEEP_SECONDS`` on a thread of the serving
process, so a push whose lease ran out (the process died mid-push) or whose worker gave it back
(an unexpected error) is delivered again without anyone asking for a sync.
"""

from __future__ import annotations

import datetime
import logging
import threading

from celery import current_app
from django.db import connections, transaction
from django.db.models import Q

from clusters.models import ClusterPush, PushState
from kernel.clock import clock_now
from kernel.periodic import PeriodicThread
from kernel.task_handover import task_hand_over

log = logging.getLogger(__name__)

PUSH_TASK = "delivery.tasks.cluster_push_task"
"""The Celery task that delivers one push (registered by :mod:`delivery.tasks`)."""


def push_enqueue(*, cluster_id: int, project_id: int | None, allocation_id: int | None = None) -> ClusterPush:
    """Record a push in the current transaction; dispatch it once that commits."""
    push = ClusterPush.objects.create(
        cluster_id=cluster_id, project_id=project_id, allocation_id=allocation_id, available_at=clock_now()
    )
    transaction.on_commit(lambda: push_dispatch(push_id=push.pk))
    return push


def push_dispatch(*, push_id: int, countdown: float | None = None) -> bool:
    """Hand a push to Celery; False (and the row stays pending for the dispatcher) when the
    broker cannot be reached. Never raises: a broker outage must not fail the request.

    The task is looked up by name in the app's registry (``kernel.task_handover``) so that
    in-process tasks (the embedded default) still run eagerly."""
    return task_hand_over(PUSH_TASK, push_id, countdown=countdown)


def pushes_due(*, now: datetime.datetime | None = None, limit: int = 500) -> list[int]:
    moment = now or clock_now()
    return list(
        ClusterPush.objects.filter(state=PushState.PENDING, available_at__lte=moment)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=moment))
        .order_by("pk")
        .values_list("pk", flat=True)[:limit]
    )


def pushes_dispatch(*, now: datetime.datetime | None = None) -> int:
    """Dispatch every due push (beat): the safety net for broker outages and killed workers."""
    dispatched = 0
    for push_id in pushes_due(now=now):
        dispatched += push_dispatch(push_id=push_id)
    return dispatched


SWEEP_SECONDS = 15.0
"""How often the in-process sweeper runs: as often as beat's ``clusters-pushes-dispatch``."""


class PushSweeper(PeriodicThread):
    """``pushes_dispatch`` every ``interval`` seconds on a daemon thread, for in-process tasks
    (where dispatching a push delivers it on the calling thread). A failed sweep is logged and the
    next one runs as usual; the thread closes its database connections after each sweep."""

    thread_name = "gpuportal-push-sweeper"

    def __init__(self, *, interval: float = SWEEP_SECONDS) -> None:
        super().__init__(interval=interval)

    def start(self) -> PushSweeper:
        super().start()
        return self

    def sweep(self) -> int:
        try:
            return pushes_dispatch()
        except Exception:  # the next sweep tries again
            log.exception("the in-process push sweep failed")
            return 0
        finally:
            connections.close_all()  # this thread's connections only

    def run_once(self) -> int:
        return self.sweep()


_sweeper: PushSweeper | None = None
_sweeper_guard = threading.Lock()


def pushes_sweeper_start() -> PushSweeper | None:
    """Start this process's sweeper when tasks run in-process (no broker, hence no beat); once per
    process. With a broker, beat dispatches due pushes and this does nothing."""
    global _sweeper
    if not current_app.conf.task_always_eager:
        return None
    with _sweeper_guard:
        if _sweeper is None or not _sweeper.running:
            _sweeper = PushSweeper().start()
        return _sweeper

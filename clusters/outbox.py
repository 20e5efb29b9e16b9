"""The transactional outbox of cluster pushes: the side that sits below allocations.

``push_enqueue`` writes a :class:`ClusterPush` row in the caller's transaction and, once that
commits, hands it to the delivery worker. If the broker is down at that moment the row simply
waits: ``pushes_dispatch`` (Celery beat) hands every due row to a worker again. The worker's side
(claim, push, record the outcome) lives in :mod:`delivery.outbox`, above allocations; this module
knows the delivery task only by its name, so nothing here imports upward.
"""

from __future__ import annotations

import datetime
import logging

from celery import current_app
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from clusters.models import ClusterPush, PushState

log = logging.getLogger(__name__)

PUSH_TASK = "delivery.tasks.cluster_push_task"
"""The Celery task that delivers one push (registered by :mod:`delivery.tasks`)."""


def push_enqueue(*, cluster_id: int, project_id: int | None, allocation_id: int | None = None) -> ClusterPush:
    """Record a push in the current transaction; dispatch it once that commits."""
    push = ClusterPush.objects.create(
        cluster_id=cluster_id, project_id=project_id, allocation_id=allocation_id, available_at=timezone.now()
    )
    transaction.on_commit(lambda: push_dispatch(push_id=push.pk))
    return push


def push_dispatch(*, push_id: int, countdown: float | None = None) -> bool:
    """Hand a push to Celery; False (and the row stays pending for the dispatcher) when the
    broker cannot be reached. Never raises: a broker outage must not fail the request.

    The task is looked up by name in the app's registry rather than sent with ``send_task`` so
    that in-process tasks (the embedded default) still run eagerly."""
    try:
        task = current_app.tasks[PUSH_TASK]
        if countdown is None:
            task.apply_async((push_id,), retry=False)
        else:
            task.apply_async((push_id,), countdown=countdown, retry=False)
    except Exception:  # the broker is down: pushes_dispatch will find the row
        log.warning("could not hand push %s to the broker; the dispatcher will retry", push_id, exc_info=True)
        return False
    return True


def pushes_due(*, now: datetime.datetime | None = None, limit: int = 500) -> list[int]:
    moment = now or timezone.now()
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

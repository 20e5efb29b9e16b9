"""Thin tasks: load by id, call a service; retries are scheduled from the outbox row's backoff."""

from __future__ import annotations

import logging

from celery import Task, shared_task

from clusters.models import Cluster
from clusters.outbox import push_dispatch, pushes_dispatch
from delivery import conf
from delivery.drivers import DriverError
from delivery.outbox import push_deliver
from delivery.services import cluster_sync

log = logging.getLogger(__name__)


@shared_task(bind=True, acks_late=True)
def cluster_push_task(self: Task, push_id: int) -> None:  # type: ignore[type-arg]
    delay = push_deliver(push_id=push_id)
    if delay is None:
        return
    if self.request.is_eager:
        # In-process tasks (the embedded default) cannot wait: use up the attempts now.
        for _ in range(conf.push_max_attempts()):
            if push_deliver(push_id=push_id, ignore_schedule=True) is None:
                return
        return
    push_dispatch(push_id=push_id, countdown=delay)


@shared_task
def cluster_pushes_dispatch_task() -> int:
    """Beat: hand every due push to a worker (broker outages, killed workers, retries)."""
    return pushes_dispatch()


@shared_task
def clusters_drift_check_task() -> int:
    """Beat: re-apply what was changed by hand on every active cluster, recording the drift."""
    repaired = 0
    for cluster_id in Cluster.objects.filter(is_active=True).order_by("pk").values_list("pk", flat=True):
        try:
            plan, _ = cluster_sync(cluster_id=cluster_id, repair_drift=True)
        except DriverError as error:
            log.warning("drift check of cluster %s failed: %s", cluster_id, error)
            continue
        repaired += len(plan.changes)
    return repaired

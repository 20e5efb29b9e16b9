"""Delivery that loses nothing: the worker's side of the outbox of cluster pushes.

``clusters.outbox.push_enqueue`` writes a :class:`ClusterPush` row in the caller's transaction and, once that
commits, asks Celery to deliver it. If the broker is down at that moment the row simply waits:
``clusters.outbox.pushes_dispatch`` (Celery beat) hands every due row to a worker again. A worker claims a row
with a lease, pushes outside any transaction, and records the outcome:

* success: the row and every older pending row for the same scope are done (the push rendered
  the state they asked for), and their allocations become active;
* failure: the row is due again after an exponential backoff (capped); after the last attempt,
  or at once for a permanent error, it is failed and its allocation too, with the reason.

A worker killed mid-push leaves its lease to expire; the row is then dispatched again (by beat,
or by the in-process sweeper of ``clusters.outbox`` when tasks run in-process). A worker that
survives an unexpected error gives its lease back at once. Pushes are idempotent, so a duplicate
delivery is harmless.

Recording the outcome follows the global lock order of :mod:`kernel.locks`: the push rows, then
their allocations (primary-key order), then the cluster (KEY SHARE), and the audit chain lock
last; PostgreSQL's deadlock victims run again (``kernel.transactions.retry_on_deadlock``).
"""

from __future__ import annotations

import datetime
import functools
import logging
import random

from django.db import transaction
from django.db.models import Q

from allocations.grants.services import (
    allocation_provision_failed,
    allocation_provision_start,
    allocation_provision_succeeded,
)
from allocations.models import Allocation
from clusters.models import Cluster, ClusterPush, PushState
from delivery import conf
from delivery.drivers import DriverError, PermanentDriverError
from delivery.metrics import push_lag_observe
from delivery.notices import push_failed_notify
from delivery.services import cluster_sync_project, cluster_sync_shared
from kernel.clock import clock_now
from kernel.locks import rows_key_share
from kernel.transactions import retry_on_deadlock

log = logging.getLogger(__name__)


def push_backoff_seconds(attempts: int, *, jitter: float = 0.2) -> float:
    """Delay before attempt ``attempts + 1``: base × 2^(attempts-1), capped, ± ``jitter``."""
    delay = min(conf.push_backoff_max_seconds(), conf.push_backoff_base_seconds() * 2.0 ** max(attempts - 1, 0))
    return float(delay * (1 + random.uniform(-jitter, jitter))) if jitter else float(delay)


@transaction.atomic
def _claim(push_id: int, *, ignore_schedule: bool) -> ClusterPush | None:
    now = clock_now()
    push = ClusterPush.objects.select_for_update(skip_locked=True).filter(pk=push_id, state=PushState.PENDING).first()
    if push is None:
        return None
    if not ignore_schedule and (push.available_at > now or (push.claimed_until and push.claimed_until > now)):
        return None
    push.attempts += 1
    push.claimed_until = now + datetime.timedelta(seconds=conf.push_lease_seconds())
    push.save(update_fields=["attempts", "claimed_until"])
    return push


def push_deliver(*, push_id: int, ignore_schedule: bool = False) -> float | None:
    """Deliver one push. Returns the delay before the next attempt when it must be retried,
    None when it is finished (done, failed, or not ours to do now)."""
    push = _claim(push_id, ignore_schedule=ignore_schedule)
    if push is None:
        return None
    try:
        return _deliver(push)
    except BaseException:
        _lease_give_back(push)  # an error that is not the driver's: due after the backoff, not the lease
        raise


def _lease_give_back(push: ClusterPush) -> None:
    """The worker failed unexpectedly (a deadlock retried in vain, the database gone): the push is
    due again after the usual backoff, rather than when its lease runs out."""
    delay = datetime.timedelta(seconds=push_backoff_seconds(push.attempts))
    try:
        ClusterPush.objects.filter(pk=push.pk, state=PushState.PENDING, claimed_until=push.claimed_until).update(
            claimed_until=None, available_at=clock_now() + delay
        )
    except Exception:  # the database is what failed: the lease runs out by itself
        log.warning("could not give back the lease of push %s", push.pk, exc_info=True)


def _deliver(push: ClusterPush) -> float | None:
    started = clock_now()
    if push.allocation_id is not None:
        allocation = allocation_provision_start(allocation_id=push.allocation_id)
        if allocation is None:  # released or expired meanwhile: the push still syncs the project
            ClusterPush.objects.filter(pk=push.pk).update(allocation=None)
            push.allocation_id = None
    try:
        if push.project_id is None:
            cluster_sync_shared(cluster_id=push.cluster_id)
        else:
            cluster_sync_project(cluster_id=push.cluster_id, project_id=push.project_id)
    except DriverError as error:
        return _failed(push, error)
    _succeeded(push, started=started)
    return None


@retry_on_deadlock()
def _succeeded(push: ClusterPush, *, started: datetime.datetime) -> None:
    """This push and the older pending ones for the same scope are done: the state they asked
    for was read after they were committed, and has now been applied.

    Every lock comes before the first audit event (kernel.locks): the push rows (SKIP LOCKED),
    their allocations in primary-key order, the cluster FOR KEY SHARE; then each allocation is
    written once (``allocation_provision_succeeded`` passes an approved one through provisioning)."""
    now = clock_now()
    covered = list(
        ClusterPush.objects.select_for_update(skip_locked=True)
        .filter(cluster_id=push.cluster_id, state=PushState.PENDING, created_at__lte=started)
        .filter(Q(project__isnull=True) if push.project_id is None else Q(project_id=push.project_id))
        .filter(Q(pk=push.pk) | Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .order_by("pk")
    )
    allocation_ids = sorted({done.allocation_id for done in covered if done.allocation_id is not None})
    list(Allocation.objects.select_for_update(of=("self",), no_key=True).filter(pk__in=allocation_ids).order_by("pk").values_list("pk"))
    rows_key_share(transaction.get_connection(), Cluster, [push.cluster_id])
    for done in covered:
        done.state = PushState.DONE
        done.completed_at = now
        done.claimed_until = None
        done.last_error = ""
        done.save(update_fields=["state", "completed_at", "claimed_until", "last_error"])
    for allocation_id in allocation_ids:
        allocation_provision_succeeded(allocation_id=allocation_id)
    lags = [(now - done.created_at).total_seconds() for done in covered]
    transaction.on_commit(functools.partial(_lags_observe, push, lags))


def _lags_observe(push: ClusterPush, lags: list[float]) -> None:
    """``gpuportal_push_lag_seconds``: each change this push carried, from its record to now."""
    cluster = Cluster.objects.filter(pk=push.cluster_id).values_list("name", flat=True).first() or str(push.cluster_id)
    scope = "cluster-wide" if push.project_id is None else "project"
    for seconds in lags:
        push_lag_observe(cluster=cluster, scope=scope, seconds=seconds)


@retry_on_deadlock()
def _failed(push: ClusterPush, error: DriverError) -> float | None:
    reason = str(error) or error.__class__.__name__
    final = isinstance(error, PermanentDriverError) or push.attempts >= conf.push_max_attempts()
    delay = None if final else push_backoff_seconds(push.attempts)
    fields: dict[str, object] = {"last_error": reason[:4000], "claimed_until": None}
    if final:
        fields |= {"state": PushState.FAILED, "completed_at": clock_now()}
    else:
        assert delay is not None
        fields["available_at"] = clock_now() + datetime.timedelta(seconds=delay)
    ClusterPush.objects.filter(pk=push.pk).update(**fields)
    if final:
        push_failed_notify(push=push, reason=reason)
    if final and push.allocation_id is not None:  # lock order: the push row (above), then its allocation
        allocation_provision_failed(allocation_id=push.allocation_id, reason=reason)
    log.warning("push %s (attempt %s) failed%s: %s", push.pk, push.attempts, "" if delay is None else f", retry in {delay:.1f}s", reason)
    return delay

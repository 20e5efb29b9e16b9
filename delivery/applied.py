"""What the portal last applied of a cluster's cluster-wide objects: the hash of each object's
inputs (:class:`clusters.models.AppliedObject`), so a push renders and applies only the objects
whose inputs changed, without a request for the others.

The rows follow one rule that keeps them true after a restart, a failed apply or a worker killed
mid-push: a row is removed before its object is applied again, and written only after the apply
succeeded. An object without a row is compared with the cluster at the next push. Hand edits on
the cluster leave the rows as they are: the periodic drift check (``delivery.services.cluster_sync``)
compares every object with the cluster, repairs and records what differs, and rewrites the rows.

Two pushes of one cluster's cluster-wide objects never run at once (``shared_push_lock``): an older
push's apply landing after a newer push's row would otherwise leave a row that lies.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

from django.db import connection
from django.db.models import Q

from clusters.models import AppliedObject
from kernel.clock import clock_now

log = logging.getLogger(__name__)

Key = tuple[str, str, str]  # kind, namespace ("" for cluster-scoped kinds), name
PUSH_LOCK_CLASS = 0x67707368  # the first key of pg_advisory_lock(int, int): "gpsh"; the second is the cluster


def applied_digests(*, cluster_id: int) -> dict[Key, str]:
    """Key → the input hash of each cluster-wide object last applied to the cluster; one query."""
    rows = AppliedObject.objects.filter(cluster_id=cluster_id).values_list("kind", "namespace", "name", "input_hash")
    return {(kind, namespace, name): digest for kind, namespace, name, digest in rows}


def _matching(keys: Iterable[Key]) -> Q:
    condition = Q(pk__in=[])
    for kind, namespace, name in keys:
        condition |= Q(kind=kind, namespace=namespace, name=name)
    return condition


def applied_forget(*, cluster_id: int, keys: Iterable[Key]) -> None:
    """Remove the rows of objects about to be applied or pruned (before the first request)."""
    chunk: list[Key] = []
    for key in keys:
        chunk.append(key)
        if len(chunk) == 200:
            AppliedObject.objects.filter(_matching(chunk), cluster_id=cluster_id).delete()
            chunk = []
    if chunk:
        AppliedObject.objects.filter(_matching(chunk), cluster_id=cluster_id).delete()


def applied_record(*, cluster_id: int, digests: Mapping[Key, str], complete: bool) -> None:
    """Write the rows of the objects a push applied or found unchanged. ``complete``: ``digests``
    is everything the cluster holds of the portal's cluster-wide objects; every other row goes."""
    now = clock_now()
    AppliedObject.objects.bulk_create(
        [
            AppliedObject(cluster_id=cluster_id, kind=kind, namespace=namespace, name=name, input_hash=digest, applied_at=now)
            for (kind, namespace, name), digest in sorted(digests.items())
        ],
        update_conflicts=True,
        unique_fields=["cluster", "kind", "namespace", "name"],
        update_fields=["input_hash", "applied_at"],
        batch_size=1000,
    )
    if complete:
        stale = set(applied_digests(cluster_id=cluster_id)) - set(digests)
        applied_forget(cluster_id=cluster_id, keys=stale)


@contextmanager
def shared_push_lock(*, cluster_id: int) -> Iterator[None]:
    """Hold the cluster's push lock (a session-level advisory lock on PostgreSQL) for the length of
    a push of its cluster-wide objects. Taken with no row locked and no transaction of the push's
    open, it waits only for another push of the same objects. SQLite runs pushes one at a time."""
    if connection.vendor != "postgresql":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s, %s)", [PUSH_LOCK_CLASS, cluster_id])
    try:
        yield
    finally:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [PUSH_LOCK_CLASS, cluster_id])
        except Exception:  # the connection is gone, and the lock with it
            log.warning("could not release the push lock of cluster %s", cluster_id, exc_info=True)

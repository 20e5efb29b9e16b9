"""The audit record of the pods a push evicted: ``cluster.pods_evicted``, one event per project
namespace, in the transaction that records the push.

What caused the evictions: a push renders the project's state as it is when the push runs, and
the push row does not say which change asked for it (a reclaim enqueues a push of the project
without an allocation). The event therefore lists, honestly as *candidates*, the project's grants
on that cluster that left it (reclaimed, released, expired) in the day before the push, newest
first, at most five, and for the reclaimed ones the request they were reclaimed for
(``reclaimed_for``): normally the first is the cause. A push delayed by more than a day (the
cluster unreachable) lists none.

When to record: a push that evicted at least one pod records it, with the pods it had to hold
back; a push that only held pods back records it when it was asked for by a change (a project's
or a cluster-wide push, a manual sync), not when the periodic drift repair finds the same budget
still in the way, so a budget that blocks for days does not fill the audit log. The outcome is
``success`` when something was evicted, ``failure`` when every chosen pod was held back (the
namespace is still beyond its quota).
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from typing import Any

from allocations.models import Allocation, AllocationState
from audit import actions
from audit.models import Outcome
from audit.services import audit_record
from clusters.models import Cluster
from delivery.drivers import ApplyResult
from delivery.eviction import PodEviction
from kernel.clock import clock_now
from tenants.models import Project

ENDED_STATES = (AllocationState.RECLAIMED, AllocationState.RELEASED, AllocationState.EXPIRED)
CAUSE_WINDOW = datetime.timedelta(days=1)
CAUSES_SHOWN = 5


def _causes(*, cluster: Cluster, project_id: int, now: datetime.datetime) -> list[dict[str, Any]]:
    rows = (
        Allocation.objects.filter(cluster=cluster, project_id=project_id, state__in=ENDED_STATES,
                                  updated_at__gte=now - CAUSE_WINDOW)
        .order_by("-updated_at", "-pk")
        .values("pk", "state", "reclaimed_for_id", "updated_at")[:CAUSES_SHOWN]
    )
    return [
        {"allocation": row["pk"], "state": row["state"], "reclaimed_for": row["reclaimed_for_id"],
         "at": row["updated_at"].isoformat()}
        for row in rows
    ]


def pods_evicted_details(*, cluster: Cluster, result: ApplyResult, with_held_back: bool) -> list[tuple[int | None, dict[str, Any]]]:
    """The events to record for ``result`` (department id, details), one per namespace; reads
    only, so the caller runs it before taking the audit chain lock."""
    evicted: dict[str, list[PodEviction]] = defaultdict(list)
    held_back: dict[str, list[PodEviction]] = defaultdict(list)
    for eviction in result.evicted:
        evicted[eviction.namespace].append(eviction)
    for eviction in result.held_back:
        held_back[eviction.namespace].append(eviction)
    namespaces = sorted(set(evicted) | (set(held_back) if with_held_back else set()))
    if not namespaces:
        return []
    projects = {project.slug: project for project in Project.objects.filter(slug__in=namespaces)}
    now = clock_now()
    events = []
    for namespace in namespaces:
        project = projects.get(namespace)
        causes = _causes(cluster=cluster, project_id=project.pk, now=now) if project else []
        events.append((
            project.department_id if project else None,
            {
                "cluster": cluster.name,
                "namespace": namespace,
                "project": project.slug if project else None,
                "evicted": [eviction.as_record() for eviction in evicted[namespace]],
                "held_back": [eviction.as_record() for eviction in held_back[namespace]],
                "allocations": causes,
                "reclaimed_for": sorted({c["reclaimed_for"] for c in causes if c["reclaimed_for"] is not None}),
            },
        ))
    return events


def pods_evicted_record(*, cluster: Cluster, events: list[tuple[int | None, dict[str, Any]]]) -> None:
    """Write the events of :func:`pods_evicted_details` (inside the push's recording transaction)."""
    for department_id, details in events:
        audit_record(
            actor=None,
            action=actions.CLUSTER_PODS_EVICTED,
            target=cluster,
            department_id=department_id,
            details=details,
            outcome=Outcome.SUCCESS if details["evicted"] else Outcome.FAILURE,
        )

"""Reclaim: grants taken to keep another request's promise, or to bring a department back
within a quota a quota window lowered (shrink policy ``reclaim``) (``docs/quotas.md``).

A victim gets its priority class's notice: it is ``reclaiming`` until ``reclaim_deadline`` (its
workloads keep running, the portal says why and until when), then ``reclaimed``: its bookings are
freed and its project's push lowers the namespace's ResourceQuota, evicting the pods beyond it
(lowest pod priority first, through the Eviction API, so PodDisruptionBudgets are honoured). A
grant of a preemptible class (notice 0), or one that has not started (nothing runs yet), is
reclaimed at once. The request it made room for waits, scheduled, until its victims are gone.

Victims are locked after the department chain and the clusters, against the global order of
``kernel.locks``, and so only with SKIP LOCKED: a grant another transaction holds is left out and
the plan made again without it; this never waits, so it cannot deadlock.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable

from django.contrib.auth.models import User

from allocations.booking import reservations
from allocations.models import Allocation, AllocationState
from allocations.notices import allocation_notify
from allocations.quotas.planning import VictimInfo
from allocations.states import RECLAIMABLE_STATES
from allocations.transitions import (
    allocation_audit,
    allocation_lock,
    allocation_move,
    allocation_snapshot,
    pending_changes_close,
    pending_changes_closed_audit,
    project_sync_enqueue,
)
from audit import actions
from kernel.clock import clock_now
from kernel.transactions import retry_on_deadlock
from notifications.events import RECLAIM_NOTICE

WHY = {
    "borrowed": "it borrowed capacity beyond its department's guarantee",
    "oversubscribed": "it held capacity beyond its department's limit through its priority class's oversubscription",
    "lower-priority": "a request of higher priority in its department needed the capacity",
    "idle": "it stayed idle past its idle policy's window and grace after a warning",
}


def victims_lock(*, ids: Iterable[int]) -> dict[int, Allocation]:
    """Row-lock the grants that are still reclaimable, skipping those another transaction holds."""
    rows = (
        Allocation.objects.select_for_update(of=("self",), skip_locked=True)
        .select_related("project", "flavor", "priority_class", "cluster")
        .filter(pk__in=sorted(set(ids)), state__in=RECLAIMABLE_STATES)
        .order_by("pk")
    )
    return {row.pk: row for row in rows}


def reclaim_reason(*, victim: VictimInfo, requester: Allocation) -> str:
    return (
        f"Reclaimed for request #{requester.pk} ({requester.quantity} × {requester.flavor.name} for "
        f"{requester.project.slug}): {WHY.get(victim.why, victim.why)}."
    )


def reclaims_start(
    *, actor: User | None, requester: Allocation | None = None, victims: list[VictimInfo],
    rows: dict[int, Allocation], now: datetime.datetime, reason: str = "", window_id: int | None = None,
    cause: str | None = None, extra: dict[str, object] | None = None,
) -> tuple[bool, list[Callable[[], None]]]:
    """Move the (locked) victims to reclaiming, or straight to reclaimed when they get no notice:
    for ``requester`` (an approval), or, without one, for the ``reason`` a quota window
    (``window_id``) lowered their department's quota below what it holds, or another ``cause``
    (an idle case). ``extra`` joins the events' details. Returns whether any still runs out its
    notice, and the audit records to write once every row lock is taken (the caller writes its own
    rows first)."""
    events: list[Callable[[], None]] = []
    waiting = False
    if cause is None:
        cause = f"request #{requester.pk}" if requester is not None else f"quota window #{window_id}"
    for victim in victims:
        row = rows[victim.allocation_id]
        before = allocation_snapshot(row)
        on_cluster = row.state != AllocationState.SCHEDULED
        notice = victim.notice_minutes if on_cluster else 0
        allocation_move(row, AllocationState.RECLAIMING)
        row.reclaimed_for = requester
        row.reclaim_reason = reclaim_reason(victim=victim, requester=requester) if requester is not None else reason
        row.reclaim_deadline = now + datetime.timedelta(minutes=notice)
        details: dict[str, object] = {
            "for": requester.pk if requester is not None else None, "why": victim.why, "reason": row.reclaim_reason,
            "deadline": row.reclaim_deadline.isoformat(), "notice_minutes": notice,
        }
        if window_id is not None:
            details["window"] = window_id
        details.update(extra or {})
        reclaiming = allocation_snapshot(row)
        closed = pending_changes_close(allocation=row, why=f"the grant is reclaimed for {cause}")
        allocation_notify(RECLAIM_NOTICE, row, reason=row.reclaim_reason, deadline=row.reclaim_deadline.isoformat(),
                          notice_minutes=notice)
        if notice > 0:
            waiting = True
            row.save()
            events.append(_event(actor, actions.ALLOCATION_RECLAIMING, row, before, details, reclaiming))
            if closed:
                events.append(_closed(actor, row, closed, cause))
            continue
        allocation_move(row, AllocationState.RECLAIMED)
        row.save()
        reservations.reservations_release(allocation=row, reason="reclaimed")
        if on_cluster:
            project_sync_enqueue(project_id=row.project_id, cluster_id=row.cluster_id)
        events.append(_event(actor, actions.ALLOCATION_RECLAIMING, row, before, details, reclaiming))
        if closed:
            events.append(_closed(actor, row, closed, cause))
        finished = {"for": details["for"], **({"window": window_id} if window_id is not None else {}), **(extra or {})}
        events.append(_event(actor, actions.ALLOCATION_RECLAIMED, row, reclaiming, finished, None))
    return waiting, events


def allocation_reclaim_idle(
    *, row: Allocation, now: datetime.datetime, reason: str, case_id: int
) -> list[Callable[[], None]]:
    """Reclaim a grant an idle policy found idle after warning it (``accounting.idle``), through the
    same path as every reclaim: its class's notice, then its bookings freed and its namespace's
    quota lowered. ``row`` is locked by the caller (then the case, in ``kernel.locks``'s order);
    returns the audit records to write once the caller's rows are written."""
    victim = VictimInfo(
        allocation_id=row.pk, project=row.project.slug, department=row.project.department.slug,
        flavor=row.flavor.name, quantity=row.quantity, priority_class=row.priority_class.name, state=row.state,
        why="idle", notice_minutes=row.priority_class.notice,
    )  # fmt: skip
    _, events = reclaims_start(
        actor=None, victims=[victim], rows={row.pk: row}, now=now, reason=reason, cause=f"idle case #{case_id}",
        extra={"idle_case": case_id},
    )  # fmt: skip
    return events


def _closed(actor: User | None, row: Allocation, ids: list[int], cause: str) -> Callable[[], None]:
    def write() -> None:
        pending_changes_closed_audit(actor=actor, allocation=row, ids=ids, why=f"the grant is reclaimed for {cause}")
    return write


def _event(actor: User | None, action: actions.AuditAction, row: Allocation, before: dict[str, object],
           details: dict[str, object], after: dict[str, object] | None) -> Callable[[], None]:
    def write() -> None:
        allocation_audit(actor=actor, action=action, allocation=row, before=before, details=details, after=after)
    return write


def allocations_reclaim_due(*, now: datetime.datetime | None = None) -> int:
    """Finish every reclaim whose notice has run out; returns how many. Each in its own transaction."""
    moment = now or clock_now()
    due = list(
        Allocation.objects.filter(state=AllocationState.RECLAIMING, reclaim_deadline__lte=moment)
        .order_by("pk").values_list("pk", flat=True)
    )
    return sum(1 for allocation_id in due if allocation_reclaim_finish(allocation_id=allocation_id, now=moment))


@retry_on_deadlock()
def allocation_reclaim_finish(*, allocation_id: int, now: datetime.datetime) -> bool:
    """A reclaiming grant whose notice ran out: free its bookings and lower its namespace's quota."""
    row = allocation_lock(allocation_id)
    if row.state != AllocationState.RECLAIMING or (row.reclaim_deadline and row.reclaim_deadline > now):
        return False
    before = allocation_snapshot(row)
    allocation_move(row, AllocationState.RECLAIMED)
    row.save()
    reservations.reservations_release(allocation=row, reason="reclaimed")
    project_sync_enqueue(project_id=row.project_id, cluster_id=row.cluster_id)
    allocation_audit(actor=None, action=actions.ALLOCATION_RECLAIMED, allocation=row, before=before,
                     details={"for": row.reclaimed_for_id, "reason": row.reclaim_reason})
    return True


def reclaims_outstanding(*, requester_ids: Iterable[int]) -> set[int]:
    """The requests (of ``requester_ids``) that still wait for a victim to run out its notice."""
    return set(
        Allocation.objects.filter(reclaimed_for_id__in=list(requester_ids), state=AllocationState.RECLAIMING)
        .values_list("reclaimed_for_id", flat=True)
    )


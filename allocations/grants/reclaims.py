"""Reclaim: grants taken, all of them or some of their units, to keep another request's promise,
or to bring a department back within a quota a quota window lowered (shrink policy ``reclaim``)
(``docs/quotas.md``).

A victim gets its priority class's notice: taken whole, it is ``reclaiming`` until
``reclaim_deadline`` (its workloads keep running, the portal says why and until when), then
``reclaimed``: its bookings are freed and its project's push lowers the namespace's ResourceQuota,
evicting the pods beyond it (lowest pod priority first, through the Eviction API, so
PodDisruptionBudgets are honoured). Taken in part (``reclaim_units`` of its units: as many as must
go, when the rest may stay), it keeps its state and, at the deadline, gives back those units
through the resize path (its highest-numbered units' bookings, the ones admission planned on). A
grant of a preemptible class (notice 0), or one that has not started (nothing runs yet), is
reclaimed at once. The request it made room for waits, scheduled, until its victims are done.

A reclaim is called off if the request it makes room for no longer holds (released, expired,
reclaimed itself) before its deadline: the grant keeps its units and goes back to the state it had
(``allocation_reclaim_restore``; the timeline's tick looks for them, and a finishing reclaim checks
once more), so nothing is taken for nothing. Every reason a victim is told is worded from the facts
that made it one (``allocations.quotas.victims``).

Victims are locked after the department chain and the clusters, against the global order of
``kernel.locks``, and so only with SKIP LOCKED: a grant another transaction holds is left out and
the plan made again without it; this never waits, so it cannot deadlock.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Iterable

from django.contrib.auth.models import User

from allocations.booking import reservations
from allocations.catalogue.states import HOLDING_STATES, RECLAIMABLE_STATES, reclaim_pending_q
from allocations.grants.changes import allocation_units_give_back
from allocations.grants.notices import allocation_notify
from allocations.grants.transitions import (
    allocation_audit,
    allocation_lock,
    allocation_move,
    allocation_snapshot,
    pending_changes_close,
    pending_changes_closed_audit,
    project_sync_enqueue,
    provision_enqueue,
)
from allocations.models import Allocation, AllocationState
from allocations.quotas.victim_info import VictimInfo
from audit import actions
from kernel.clock import clock_now
from kernel.errors import Conflict
from kernel.transactions import retry_on_deadlock
from notifications.events import RECLAIM_NOTICE

WHY = {
    "borrowed": "it borrowed capacity beyond its department's guarantee",
    "oversubscribed": "it held capacity beyond a department's limit",
    "lower-priority": "a request of higher priority in its department needed the capacity",
    "idle": "it stayed idle past its idle policy's window and grace after a warning",
}
"""What a reason says when the plan gave no facts (an idle case words its own)."""


def victims_lock(*, ids: Iterable[int]) -> dict[int, Allocation]:
    """Row-lock the grants that are still reclaimable, skipping those another transaction holds."""
    rows = (
        Allocation.objects.select_for_update(of=("self",), skip_locked=True, no_key=True)
        .select_related("project", "flavor", "priority_class", "cluster")
        .filter(pk__in=sorted(set(ids)), state__in=RECLAIMABLE_STATES)
        .order_by("pk")
    )
    return {row.pk: row for row in rows}


def reclaim_reason(*, victim: VictimInfo, requester: Allocation) -> str:
    """The reason a victim is told, from the facts that made it one (``VictimInfo.facts``)."""
    what = (f"{victim.gives_back} of its {victim.quantity} units reclaimed" if victim.partial else "Reclaimed")
    return (
        f"{what} for request #{requester.pk} ({requester.quantity} × {requester.flavor.name} for "
        f"{requester.project.slug}): {victim.facts or WHY.get(victim.why, victim.why)}."
    )


def _promised_elsewhere(rows: Iterable[Allocation]) -> list[int]:
    """The rows that a reclaim under way is making room for: never victims themselves."""
    return sorted(Allocation.objects.filter(reclaim_pending_q(), reclaimed_for__in=[row.pk for row in rows])
                  .values_list("reclaimed_for_id", flat=True).distinct())


def _check_victims(victims: list[VictimInfo], rows: dict[int, Allocation], *, requester: Allocation | None) -> None:
    """What the plan saw still stands under the rows' locks: no victim a reclaim under way is making
    room for (the plan leaves those out; this holds it to that) and, for a request, the same
    quantities (a quota window's or an idle case's reclaim takes what is there: ``_as_locked``)."""
    changed = [victim.allocation_id for victim in victims
               if requester is not None and rows[victim.allocation_id].quantity != victim.quantity]
    promised = _promised_elsewhere(rows[victim.allocation_id] for victim in victims)
    if changed or promised:
        raise Conflict(
            "The grants to reclaim changed while the plan was made (or one of them is what a reclaim makes room for); "
            "try again.", details={"changed": changed, "promised": promised},
        )


def reclaims_start(
    *, actor: User | None, requester: Allocation | None = None, victims: list[VictimInfo],
    rows: dict[int, Allocation], now: datetime.datetime, reason: str = "", window_id: int | None = None,
    cause: str | None = None, extra: dict[str, object] | None = None,
) -> tuple[bool, list[Callable[[], None]]]:
    """Reclaim the (locked) victims, each all of it or only ``units`` of it: with notice, a whole
    victim becomes ``reclaiming`` and a partial one keeps its state with ``reclaim_units`` set;
    without notice they are reclaimed (or lowered) at once. For ``requester`` (an approval), or,
    without one, for the ``reason`` a quota window (``window_id``) lowered their department's quota
    below what it holds, or another ``cause`` (an idle case). ``extra`` joins the events' details.
    Returns whether any still runs out its notice, and the audit records to write once every row
    lock is taken (the caller writes its own rows first)."""
    events: list[Callable[[], None]] = []
    waiting = False
    if cause is None:
        cause = f"request #{requester.pk}" if requester is not None else f"quota window #{window_id}"
    if victims:
        _check_victims(victims, rows, requester=requester)
    for planned in victims:
        row = rows[planned.allocation_id]
        victim = _as_locked(planned, row)
        before = allocation_snapshot(row)
        on_cluster = row.state != AllocationState.SCHEDULED
        notice = victim.notice_minutes if on_cluster else 0
        if requester is None and victim.partial:
            reason_now = f"{reason} {victim.gives_back} of its {victim.quantity} units go."
        else:
            reason_now = reclaim_reason(victim=victim, requester=requester) if requester is not None else reason
        _mark(row, victim=victim, requester=requester, now=now, notice=notice, reason=reason_now)
        details: dict[str, object] = {
            "for": requester.pk if requester is not None else None, "why": victim.why, "reason": row.reclaim_reason,
            "deadline": row.reclaim_deadline.isoformat() if row.reclaim_deadline else None, "notice_minutes": notice,
            "units": victim.gives_back, "partial": victim.partial, **({"facts": victim.facts} if victim.facts else {}),
        }
        if window_id is not None:
            details["window"] = window_id
        details.update(extra or {})
        reclaiming = allocation_snapshot(row)
        closed = pending_changes_close(allocation=row, why=f"the grant is reclaimed for {cause}")
        allocation_notify(RECLAIM_NOTICE, row, reason=row.reclaim_reason, deadline=details["deadline"],
                          notice_minutes=notice, units=victim.gives_back, partial=victim.partial)
        events.append(_event(actor, actions.ALLOCATION_RECLAIMING, row, before, details, reclaiming))
        if closed:
            events.append(_closed(actor, row, closed, cause))
        if notice > 0:
            waiting = True
            row.save()
            continue
        finished = {"for": details["for"], **({"window": window_id} if window_id is not None else {}), **(extra or {})}
        events.append(_reclaim_end(actor, row, before=reclaiming, details=finished, on_cluster=on_cluster))
    return waiting, events


def _as_locked(victim: VictimInfo, row: Allocation) -> VictimInfo:
    """The victim with the quantity its locked row has (a resize may have lowered it since the
    plan): the units it gives back, at most all of them."""
    if row.quantity == victim.quantity:
        return victim
    units = min(victim.gives_back, row.quantity)
    return dataclasses.replace(victim, quantity=row.quantity, units=units)


def _mark(row: Allocation, *, victim: VictimInfo, requester: Allocation | None, now: datetime.datetime, notice: int,
          reason: str) -> None:
    """The row on its way out: all of it (``reclaiming``, remembering its state), or some units."""
    if victim.partial:
        row.reclaim_units = victim.gives_back
        row.reclaim_from_state = ""
    else:
        # A grant already giving back units to a request keeps that request waiting for it; its
        # reclaim, now for another cause, is not called off if the request goes away.
        takes_over = requester is None and row.reclaimed_for_id is not None
        row.reclaim_from_state = "" if takes_over else row.state
        allocation_move(row, AllocationState.RECLAIMING)
        row.reclaim_units = None
    if requester is not None or row.reclaimed_for_id is None:
        row.reclaimed_for = requester
    row.reclaim_reason = reason
    row.reclaim_deadline = now + datetime.timedelta(minutes=notice)


def _reclaim_end(actor: User | None, row: Allocation, *, before: dict[str, object], details: dict[str, object],
                 on_cluster: bool) -> Callable[[], None]:
    """Finish the (locked, marked) row's reclaim: all of it becomes ``reclaimed`` and its bookings
    are freed; a partial one gives back its units through the resize path (its highest-numbered
    units' bookings, the ones admission planned on) and keeps its state. Saves the row and enqueues
    its project's push; returns the audit record to write."""
    if row.state == AllocationState.RECLAIMING:
        allocation_move(row, AllocationState.RECLAIMED)
        row.save()
        reservations.reservations_release(allocation=row, reason="reclaimed")
    else:
        units = row.reclaim_units or 0
        released = allocation_units_give_back(allocation=row, keep=row.quantity - units, reason="reclaimed")
        details = {**details, "units": units, "partial": True, "released_units": released}
        _unmark(row)
        row.save()
    if on_cluster:
        project_sync_enqueue(project_id=row.project_id, cluster_id=row.cluster_id)
    return _event(actor, actions.ALLOCATION_RECLAIMED, row, before, details, None)


def _unmark(row: Allocation) -> None:
    row.reclaimed_for = None
    row.reclaim_units = None
    row.reclaim_deadline = None
    row.reclaim_reason = ""
    row.reclaim_from_state = ""


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
    """Call off every reclaim whose request is gone (``allocation_reclaim_restore``), then finish
    every reclaim whose notice has run out; returns how many finished. Each in its own transaction."""
    moment = now or clock_now()
    reclaims_restore_orphaned()
    due = list(
        Allocation.objects.filter(reclaim_pending_q(), reclaim_deadline__lte=moment)
        .order_by("pk").values_list("pk", flat=True)
    )
    return sum(1 for allocation_id in due if allocation_reclaim_finish(allocation_id=allocation_id, now=moment))


def _pending(row: Allocation) -> bool:
    return row.state == AllocationState.RECLAIMING or (
        row.reclaim_units is not None and row.state in HOLDING_STATES
    )


def _request_gone(row: Allocation) -> str | None:
    """The state of the request the row's reclaim makes room for, when it no longer holds (released,
    expired, reclaimed itself): the reclaim would free capacity for nothing. None: it still holds,
    or the reclaim has a cause of its own (a quota window, an idle case, or one that took it over)."""
    if row.reclaimed_for_id is None or (row.state == AllocationState.RECLAIMING and not row.reclaim_from_state):
        return None
    state = Allocation.objects.filter(pk=row.reclaimed_for_id).values_list("state", flat=True).first()
    return None if state in HOLDING_STATES else str(state)


@retry_on_deadlock()
def allocation_reclaim_finish(*, allocation_id: int, now: datetime.datetime) -> bool:
    """A reclaim whose notice ran out: the grant's bookings (or the units it gives back) are freed
    and its namespace's quota lowered; called off instead when its request is gone."""
    row = allocation_lock(allocation_id)
    if not _pending(row) or (row.reclaim_deadline and row.reclaim_deadline > now):
        return False
    if _request_gone(row) is not None:
        return _restore(row)
    before = allocation_snapshot(row)
    write = _reclaim_end(None, row, before=before, details={"for": row.reclaimed_for_id, "reason": row.reclaim_reason},
                         on_cluster=row.state != AllocationState.SCHEDULED)
    write()
    return True


def reclaims_restore_orphaned() -> int:
    """Call off every reclaim under way whose request no longer holds; returns how many."""
    found = list(
        Allocation.objects.filter(reclaim_pending_q()).exclude(reclaimed_for=None)
        .exclude(reclaimed_for__state__in=HOLDING_STATES).order_by("pk").values_list("pk", flat=True)
    )
    return sum(1 for allocation_id in found if allocation_reclaim_restore(allocation_id=allocation_id))


@retry_on_deadlock()
def allocation_reclaim_restore(*, allocation_id: int) -> bool:
    """Call off the grant's reclaim if the request it makes room for no longer holds: it keeps its
    units (a reclaiming grant goes back to the state it had), and its owner is told."""
    row = allocation_lock(allocation_id)
    if not _pending(row) or _request_gone(row) is None:
        return False
    return _restore(row)


def _restore(row: Allocation) -> bool:
    gone = _request_gone(row)
    before = allocation_snapshot(row)
    details: dict[str, object] = {
        "for": row.reclaimed_for_id, "request_state": gone, "reason": row.reclaim_reason,
        "deadline": row.reclaim_deadline.isoformat() if row.reclaim_deadline else None,
        "units": row.reclaim_units or row.quantity, "partial": row.state != AllocationState.RECLAIMING,
    }
    if row.state == AllocationState.RECLAIMING:
        allocation_move(row, row.reclaim_from_state)
    _unmark(row)
    row.save()
    if row.state in (AllocationState.APPROVED, AllocationState.PROVISIONING):  # its push was skipped meanwhile
        provision_enqueue(row.pk)
    why = f"Request #{details['for']} is {gone}: the reclaim is called off and the grant keeps its units."
    allocation_notify(RECLAIM_NOTICE, row, cancelled=True, reason=why)
    allocation_audit(actor=None, action=actions.ALLOCATION_RECLAIM_CANCELLED, allocation=row, before=before,
                     details={**details, "why": why})
    return True


def reclaims_outstanding(*, requester_ids: Iterable[int]) -> set[int]:
    """The requests (of ``requester_ids``) that still wait for a victim to run out its notice."""
    return set(
        Allocation.objects.filter(reclaim_pending_q(), reclaimed_for_id__in=list(requester_ids))
        .values_list("reclaimed_for_id", flat=True)
    )

"""An allocation's history, read from the audit log, and its cluster sync status."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.utils.text import capfirst

from allocations.catalogue.states import reclaim_pending_q
from allocations.models import Allocation, AllocationState, ChangeKind
from audit.actions import get_action
from audit.models import AuditEvent
from kernel.times import minute_utc, time_readable
from tenants.access import access_for

_NOTE_KEYS = ("comment", "reason", "message", "justification")
_STATE_LABELS = dict(AllocationState.choices)
_CHANGE_KINDS = dict(ChangeKind.choices)


@dataclass(frozen=True)
class TimelineEntry:
    occurred_at: datetime.datetime
    actor: str
    action: str
    description: str
    outcome: str
    change: str
    note: str
    state: str = ""  # the state the event moved the allocation to (empty: none)
    extra: tuple[str, ...] = ()  # what else the event says, one line each

    @property
    def state_label(self) -> str:
        return _STATE_LABELS.get(self.state, self.state)


def _victim(victim: Any) -> str:
    if not isinstance(victim, dict):
        return str(victim)
    units, quantity = victim.get("units"), victim.get("quantity")
    part = f"{units} of its " if isinstance(units, int) and isinstance(quantity, int) and units < quantity else ""
    return (f"#{victim.get('allocation')} ({part}{victim.get('quantity')} × {victim.get('flavor')} of {victim.get('project')}, "
            f"department {victim.get('department')}: {victim.get('why')}, {victim.get('notice_minutes')} min notice)")


def _extra(details: dict[str, Any]) -> tuple[str, ...]:
    """The quota promises' details of an event, in words: the grants an approval reclaimed, when a
    scheduled grant starts, a reclaim's deadline, the terms a change asks for."""
    lines: list[str] = []
    if isinstance(details.get("reclaimed"), list) and details["reclaimed"]:
        lines.append("Reclaims " + "; ".join(_victim(victim) for victim in details["reclaimed"]))
    if details.get("starts"):
        lines.append(f"Starts {time_readable(details['starts'])}" if "T" in str(details["starts"]) else f"Starts {details['starts']}")
    if details.get("deadline"):
        notice = details.get("notice_minutes")
        lines.append(f"Runs until {time_readable(details['deadline'])}" + (f" ({notice} minutes' notice)" if notice else ""))
    if details.get("change"):
        kind = _CHANGE_KINDS.get(str(details.get("kind")), str(details.get("kind") or "change")).lower()
        lines.append(f"Change #{details['change']} ({kind})")
    if details.get("ends_at"):
        lines.append(f"New end: {time_readable(details['ends_at'])}")
    if details.get("quantity"):
        lines.append(f"New quantity: {details['quantity']}")
    if details.get("released_units"):
        lines.append("Units given back: " + ", ".join(str(unit) for unit in details["released_units"]))
    return tuple(lines)


def _describe(code: str) -> str:
    try:
        return get_action(code).description
    except ValueError:
        return code


def _shown(value: object) -> str:
    return "—" if value is None or value == "" else str(value)


def _entry(event: AuditEvent) -> TimelineEntry:
    before, after, details = event.before or {}, event.after or {}, event.details or {}
    changes = [f"{key}: {_shown(before[key])} → {_shown(after.get(key))}" for key in sorted(before) if key in after]
    note = next((str(details[key]) for key in _NOTE_KEYS if details.get(key)), "")
    return TimelineEntry(
        occurred_at=event.occurred_at,
        actor=event.actor_username or "system",
        action=event.action,
        description=_describe(event.action),
        outcome=event.outcome,
        change="; ".join(changes),
        note=note,
        state=str(after["state"]) if "state" in before and "state" in after else "",
        extra=_extra(details),
    )


def allocation_timeline(*, allocation: Allocation) -> list[TimelineEntry]:
    """Every audit event about this allocation, oldest first. Call only after the caller was
    allowed to read the allocation (``allocation_get``)."""
    events = AuditEvent.objects.filter(target_type=allocation._meta.label_lower, target_id=str(allocation.pk))
    return [_entry(event) for event in events.order_by("occurred_at", "pk")]


@dataclass(frozen=True)
class SyncStatus:
    label: str
    tone: str  # ok, busy, error, none


def sync_status(allocation: Allocation) -> SyncStatus:
    """Where the allocation stands with its cluster, in a few words."""
    cluster = allocation.cluster
    state = allocation.state
    if state in (AllocationState.PENDING, AllocationState.REJECTED, AllocationState.CANCELLED):
        return SyncStatus("not on a cluster", "none")
    if cluster is None:
        return SyncStatus("no cluster chosen", "none")
    if state == AllocationState.SCHEDULED:
        return SyncStatus(f"booked on {cluster.name}, nothing there before its start", "none")
    if state == AllocationState.RECLAIMING:
        return SyncStatus(f"still on {cluster.name} until its notice ends", "busy")
    if state == AllocationState.FAILED:
        return SyncStatus(f"push to {cluster.name} failed", "error")
    if state in (AllocationState.APPROVED, AllocationState.PROVISIONING):
        return SyncStatus(f"pushing to {cluster.name}", "busy")
    synced = cluster.last_sync_at is not None and cluster.last_sync_at >= allocation.updated_at
    if cluster.last_sync_error:
        return SyncStatus(f"{cluster.name}: last sync failed", "error")
    if state == AllocationState.ACTIVE:
        return SyncStatus(f"in sync on {cluster.name}", "ok")
    return SyncStatus(f"removed from {cluster.name}" if synced else f"removal pending on {cluster.name}",
                      "ok" if synced else "busy")


@dataclass(frozen=True)
class Standing:
    """What the allocation page says about a grant that is scheduled, being reclaimed or reclaimed."""

    text: str
    request_id: int | None = None  # the request it is reclaimed for, when the viewer may open it
    waiting_on: tuple[tuple[int, bool], ...] = ()  # (id, readable) of the grants a scheduled one waits for


def _utc(moment: datetime.datetime | None) -> str:
    return minute_utc(moment) if moment is not None else "—"


def partial_reclaim_words(allocation: Allocation) -> str:
    """What a grant giving back some of its units says about it, after its state ("active gives back
    1 of its 4 units at ... UTC"); empty for any other grant (a whole reclaim is its state)."""
    if allocation.reclaim_units is None or allocation.reclaim_deadline is None:
        return ""
    if allocation.state == AllocationState.RECLAIMING:
        return ""
    return (f"gives back {allocation.reclaim_units} of its {allocation.quantity} units "
            f"at {_utc(allocation.reclaim_deadline)}")


def allocation_standing(
    *, user: AbstractBaseUser | AnonymousUser, allocation: Allocation, timeline: list[TimelineEntry]
) -> Standing | None:
    """Why a grant is going, and until when; or when a scheduled grant starts. One query for a
    scheduled grant (the grants it reclaims) and for a reclaimed one (its request's department);
    none otherwise. Call after ``allocation_get``."""
    access = access_for(user)
    state = allocation.state
    if state in (AllocationState.RECLAIMING, AllocationState.RECLAIMED):
        reason = allocation.reclaim_reason or (
            f"Reclaimed for request #{allocation.reclaimed_for_id}." if allocation.reclaimed_for_id else "Reclaimed."
        )
        readable = False
        if allocation.reclaimed_for_id is not None:
            department = (Allocation.objects.filter(pk=allocation.reclaimed_for_id)
                          .values_list("project__department_id", flat=True).first())
            readable = department is not None and access.can_read_department(department)
        target = allocation.reclaimed_for_id if readable else None
        if state == AllocationState.RECLAIMING:
            return Standing(f"{reason} Runs until {_utc(allocation.reclaim_deadline)}.", request_id=target)
        released = next((entry.occurred_at for entry in reversed(timeline) if entry.action == "allocation.reclaimed"),
                        allocation.reclaim_deadline)
        return Standing(f"Its capacity was released at {_utc(released)}. {reason}", request_id=target)
    if gives_back := partial_reclaim_words(allocation):
        return Standing(f"{allocation.reclaim_reason} {capfirst(gives_back)}.")
    if state != AllocationState.SCHEDULED:
        return None
    victims = list(
        Allocation.objects.filter(reclaim_pending_q(), reclaimed_for=allocation)
        .order_by("pk").values_list("pk", "reclaim_deadline", "project__department_id")
    )
    if not victims:
        return Standing(f"Starts at {_utc(allocation.starts_at)}.")
    last = max((deadline for _, deadline, _ in victims if deadline is not None), default=None)
    text = (f"Starts once the grants it reclaims have run out their notice "
            f"({', '.join(f'#{pk}' for pk, _, _ in victims)}), by {_utc(last)}")
    if last is None or allocation.starts_at > last:
        text += f", and not before its start at {_utc(allocation.starts_at)}"
    return Standing(f"{text}.", waiting_on=tuple((pk, access.can_read_department(dept)) for pk, _, dept in victims))

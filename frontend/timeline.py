"""An allocation's history, read from the audit log, and its cluster sync status."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from allocations.models import Allocation, AllocationState
from audit.actions import get_action
from audit.models import AuditEvent

_NOTE_KEYS = ("comment", "reason", "message", "justification")


@dataclass(frozen=True)
class TimelineEntry:
    occurred_at: datetime.datetime
    actor: str
    action: str
    description: str
    outcome: str
    change: str
    note: str


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

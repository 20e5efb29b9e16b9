"""Thin tasks: load by id, call a service. Provisioning is delivered through the cluster push
outbox (``clusters.outbox``): approval writes the push row, a worker applies it."""

from __future__ import annotations

from celery import shared_task

from allocations.admission.why_refresh import waiting_reasons_refresh
from allocations.fair_share.services import fair_share_tick
from allocations.grants.notices import allocations_expiry_notices
from allocations.grants.reclaims import allocations_reclaim_due
from allocations.grants.scheduling import allocations_start_due
from allocations.grants.services import allocations_expire
from allocations.windows.tick import quota_windows_tick


@shared_task
def allocations_expire_task() -> int:
    return allocations_expire()


@shared_task
def allocations_timeline_task() -> dict[str, int]:
    """What the clock moves: the quota windows' edges that fell due apply (first: a shrink's
    reclaims without notice free capacity now), grants that ended expire, reclaims whose notice ran
    out finish (freeing the capacity they held), then scheduled grants whose start came (and whose
    victims are gone) are provisioned. In this order, so that a start finds the room that was freed
    for it."""
    return {
        "window_edges": len(quota_windows_tick().applied),
        "expired": allocations_expire(),
        "reclaimed": allocations_reclaim_due(),
        "started": allocations_start_due(),
    }


@shared_task
def allocations_expiry_notices_task() -> int:
    """Owners told their grant ends in 7 days, then 1 (each once per end; docs/notifications.md)."""
    return allocations_expiry_notices()


@shared_task
def waiting_reasons_refresh_task() -> int:
    """The primary reason of the stalest waiting requests, kept for /metrics (docs/pending.md)."""
    return waiting_reasons_refresh()


@shared_task
def fair_share_tick_task() -> dict[str, object]:
    """Each department's decayed usage brought up to now (every 5 minutes: gpuportal/periodic.py)."""
    return fair_share_tick().as_dict()


@shared_task
def placement_defrag_scheduled_task() -> list[dict[str, object]]:
    """The periodic defragmentation pass (beat entry only when ``GPUPORTAL_DEFRAG_EVERY`` is set)."""
    from allocations.booking.defrag_schedule import defrag_scheduled_run

    return [run.summary() for run in defrag_scheduled_run()]

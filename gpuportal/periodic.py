"""The periodic work, in one schedule read by both of its runners: Celery beat (the settings build
``CELERY_BEAT_SCHEDULE`` from it) and, on the embedded default (in-process tasks, hence no beat),
the serving process's clock (``gpuportal/clock.py``), which runs every entry marked ``CLOCK`` at the
same interval. An entry the clock does not run names what does its work there instead.

Intervals are seconds, or the name of the setting that holds them; ``when`` names a setting that
must be set for the entry to run at all (LDAP configured, periodic defragmentation turned on).
Nothing here imports Django: the settings module reads it while it is being built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

CLOCK = "the clock"


@dataclass(frozen=True)
class Periodic:
    name: str  # beat's entry
    task: str  # the task, dotted
    every: float | str  # seconds, or the setting that holds them
    embedded: str = CLOCK  # who does the work without a broker: the clock, or what does instead
    when: str | None = None  # a setting that must be set for the entry to run

    def seconds(self, read: Callable[[str], Any]) -> float:
        return float(read(self.every)) if isinstance(self.every, str) else self.every

    def wanted(self, read: Callable[[str], Any]) -> bool:
        return self.when is None or bool(read(self.when))


SCHEDULE: tuple[Periodic, ...] = (
    # Quota windows' edges, expiry, reclaims whose notice ran out, scheduled starts (docs/quotas.md).
    Periodic("allocations-timeline", "allocations.tasks.allocations_timeline_task", 30.0),
    Periodic("allocations-expire", "allocations.tasks.allocations_expire_task", 60.0,
             embedded="allocations-timeline, which expires the grants that ended first"),
    Periodic("audit-checkpoint-publish", "audit.tasks.audit_checkpoint_publish_task",
             "GPUPORTAL_AUDIT_CHECKPOINT_INTERVAL_SECONDS",
             embedded="audit/heartbeat.py, its own thread, so that a long tick never delays a checkpoint"),
    Periodic("clusters-pushes-dispatch", "delivery.tasks.cluster_pushes_dispatch_task", 15.0,
             embedded="clusters/outbox.py's push sweeper, its own thread"),
    Periodic("clusters-drift-check", "delivery.tasks.clusters_drift_check_task", 300.0),
    Periodic("telemetry-nodes-mark-stale", "telemetry.tasks.telemetry_nodes_mark_stale_task", 30.0),
    # The custody ledger's chain heads into the audit log, so that a rewrite shows (docs/custody.md).
    Periodic("custody-anchor", "custody.tasks.custody_anchor_task", 300.0),
    Periodic("telemetry-samples-roll-up", "telemetry.tasks.telemetry_samples_roll_up_task", 300.0),
    Periodic("telemetry-samples-trim", "telemetry.tasks.telemetry_samples_trim_task", 3600.0),
    Periodic("telemetry-utilisation-tick", "telemetry.tasks.telemetry_utilisation_tick_task",
             "GPUPORTAL_UTILISATION_EVERY"),
    Periodic("accounting-usage-roll", "accounting.tasks.accounting_usage_roll_task", 300.0),
    Periodic("accounting-statements-close", "accounting.tasks.accounting_statements_close_task", 3600.0),
    # The idle ladder over every active grant (docs/accounting.md, "Idle grants").
    Periodic("accounting-idle-evaluate", "accounting.tasks.accounting_idle_evaluate_task", 300.0),
    # Each department's decayed usage, for fair share (docs/accounting.md, "Fair share").
    Periodic("allocations-fair-share-tick", "allocations.tasks.fair_share_tick_task", 300.0),
    # Why each request waits, kept for /metrics (docs/pending.md).
    Periodic("allocations-waiting-reasons", "allocations.tasks.waiting_reasons_refresh_task", 60.0),
    Periodic("allocations-expiry-notices", "allocations.tasks.allocations_expiry_notices_task", 900.0),
    Periodic("notifications-dispatch", "notifications.tasks.notifications_dispatch_task", 30.0),
    Periodic("notifications-digests", "notifications.tasks.notification_digests_task", 600.0),
    # The directory sync (docs/identity.md, "LDAP").
    Periodic("tenants-ldap-sync", "tenants.tasks.ldap_sync_task", "GPUPORTAL_LDAP_SYNC_EVERY",
             when="GPUPORTAL_LDAP_SERVER_URI"),
    # make run's demo cluster has no exporter and no node agent: the demo reads it as time passes
    # (demo/usage.py), so that the GPU map and the charts have a value now. Off unless asked for.
    Periodic("demo-usage-continue", "demo.tasks.demo_usage_continue_task", 300.0, when="GPUPORTAL_DEMO_READINGS"),
    # Periodic defragmentation (allocations/booking/defrag_schedule.py): off unless an interval is set.
    Periodic("placement-defrag", "allocations.tasks.placement_defrag_scheduled_task", "GPUPORTAL_DEFRAG_EVERY",
             when="GPUPORTAL_DEFRAG_EVERY"),
)


def beat_schedule(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Beat's schedule: every entry that is wanted under these settings' ``values``."""
    return {
        entry.name: {"task": entry.task, "schedule": entry.seconds(values.__getitem__)}
        for entry in SCHEDULE
        if entry.wanted(values.__getitem__)
    }


def clock_entries() -> tuple[Periodic, ...]:
    return tuple(entry for entry in SCHEDULE if entry.embedded == CLOCK)

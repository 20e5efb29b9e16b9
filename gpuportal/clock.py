"""The clock of the embedded default: with in-process tasks there is no Celery beat, so the serving
process runs the time-driven allocation work itself (grants that ended expire, reclaims whose notice
ran out finish, scheduled grants whose start came are provisioned) every ``TICK_SECONDS``, at most
that late, and rolls the recent hours' usage into GPU-equivalent-hours, evaluates idle grants and
decays the departments' fair-share usage every ``ROLL_EVERY_TICKS``, and syncs the LDAP directory
every ``GPUPORTAL_LDAP_SYNC_EVERY`` seconds when one is configured. With a broker, beat's ``allocations-timeline`` entry does the same and this stays off."""

from __future__ import annotations

import logging
import threading
import time

from celery import current_app
from django.db import connections

from accounting.tasks import accounting_idle_evaluate_task, accounting_usage_roll_task
from allocations.tasks import allocations_expiry_notices_task, allocations_timeline_task, fair_share_tick_task
from kernel.conf import setting_int
from kernel.periodic import PeriodicThread
from notifications.tasks import notification_digests_task, notifications_dispatch_task
from tenants.ldap.conf import ldap_configured
from tenants.tasks import ldap_sync_task

log = logging.getLogger(__name__)

TIMELINE_TASK = "allocations.tasks.allocations_timeline_task"
"""Beat's name for the same task; the clock calls it directly (imported here, it is registered in
the serving process, whose start-up does not import the apps' task modules)."""
TICK_SECONDS = 30.0
ROLL_EVERY_TICKS = 10
"""The usage roll-up, the idle evaluation and the fair-share tick (beat's ``accounting-usage-roll``,
``accounting-idle-evaluate`` and ``allocations-fair-share-tick``, every 5 minutes) run every tenth tick."""


class Clock(PeriodicThread):
    """Runs the timeline task on a daemon thread every ``interval`` seconds; a failed tick is
    logged and the next one runs as usual."""

    thread_name = "gpuportal-clock"

    def __init__(self, *, interval: float = TICK_SECONDS) -> None:
        super().__init__(interval=interval)
        self._ticks = 0
        self._ldap_synced_at: float | None = None

    def start(self) -> Clock:
        super().start()
        return self

    def tick(self) -> dict[str, int]:
        try:
            result = allocations_timeline_task.apply().get(propagate=True)
            return dict(result)
        except Exception:  # the next tick tries again
            log.exception("the in-process timeline tick failed")
            return {}
        finally:
            self._roll_when_due()
            self._ldap_sync_when_due()
            connections.close_all()  # this thread's connections only

    def _roll_when_due(self) -> None:
        """The usage roll-up on every ``ROLL_EVERY_TICKS``-th tick, the first included; a failure is
        logged and the next due tick rolls the same hours again."""
        due = self._ticks % ROLL_EVERY_TICKS == 0
        self._ticks += 1
        if not due:
            return
        try:
            accounting_usage_roll_task.apply().get(propagate=True)
        except Exception:
            log.exception("the in-process usage roll-up failed")
        try:
            accounting_idle_evaluate_task.apply().get(propagate=True)
        except Exception:
            log.exception("the in-process idle evaluation failed")
        try:
            fair_share_tick_task.apply().get(propagate=True)
        except Exception:
            log.exception("the in-process fair-share tick failed")
        for task in (allocations_expiry_notices_task, notifications_dispatch_task, notification_digests_task):
            try:  # expiry notices, deliveries due again after a failure, and the daily digests
                task.apply().get(propagate=True)
            except Exception:
                log.exception("the in-process %s failed", task.name)

    def _ldap_sync_when_due(self) -> None:
        """The directory sync (beat's ``tenants-ldap-sync``) every ``GPUPORTAL_LDAP_SYNC_EVERY`` seconds,
        the first tick included, when LDAP is configured; a failure is logged by the sync itself."""
        if not ldap_configured():
            return
        now = time.monotonic()
        if self._ldap_synced_at is not None and now - self._ldap_synced_at < setting_int("GPUPORTAL_LDAP_SYNC_EVERY"):
            return
        self._ldap_synced_at = now
        try:
            ldap_sync_task.apply().get(propagate=True)
        except Exception:
            log.exception("the in-process LDAP directory sync failed")

    def run_once(self) -> dict[str, int]:
        return self.tick()


_clock: Clock | None = None
_guard = threading.Lock()


def clock_start() -> Clock | None:
    """Start this process's clock when tasks run in-process; once per process."""
    global _clock
    if not current_app.conf.task_always_eager:
        return None
    with _guard:
        if _clock is None or not _clock.running:
            _clock = Clock().start()
        return _clock

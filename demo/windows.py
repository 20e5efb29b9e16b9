"""Demo quota windows for ``manage.py seed_demo`` (docs/quotas.md, "Quota windows"): created once,
through the services, by the platform admin ``admin`` and approved by the second one, ``frank``
(four-eyes: nobody approves their own; with four-eyes off they are in force at once), so in force
from their start, only while the database holds no quota window at all.

* ``nlp`` trains at night: its GPU-equivalent limit rises from 12 to 16 every day from 20:00 to
  08:00 Europe/Berlin (a recurring window: RRULE ``FREQ=DAILY;BYHOUR=20;BYMINUTE=0;BYSECOND=0``,
  12 hours each; wall-clock times, so it stays 20:00-08:00 across the DST changes).
* By day (08:00-20:00 Europe/Berlin) the preemptible class, nlp's training work, may use at most 4
  of those GPU-equivalents (a third of the day's 12): a window on ``gpu-preemptible``'s share.
* ``vision`` holds a festival next week: its GPU-equivalent limit rises by 4 (12 to 16) for three
  days from next Monday 08:00 UTC (a temporary window; it returns to 12 by itself).
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.contrib.auth.models import User

from allocations.models import PriorityClass, Quota
from allocations.models.windows import QuotaWindow, WindowKind, WindowState
from allocations.windows.services import quota_window_approve, quota_window_create
from allocations.windows.terms import WindowTerms
from kernel.clock import clock_now

BERLIN = "Europe/Berlin"
NIGHTLY = "FREQ=DAILY;BYHOUR=20;BYMINUTE=0;BYSECOND=0"
BY_DAY = "FREQ=DAILY;BYHOUR=8;BYMINUTE=0;BYSECOND=0"
TWELVE_HOURS = 12 * 60


def _today_at(hour: int, zone: str, now: datetime.datetime) -> datetime.datetime:
    """``hour`` o'clock today, local time in ``zone`` (the first occurrence of a daily rule)."""
    local = now.astimezone(ZoneInfo(zone))
    return local.replace(hour=hour, minute=0, second=0, microsecond=0)


def _next_monday(now: datetime.datetime) -> datetime.datetime:
    today = now.astimezone(datetime.UTC).replace(hour=8, minute=0, second=0, microsecond=0)
    return today + datetime.timedelta(days=7 - today.weekday())


def demo_windows_seed(*, now: datetime.datetime | None = None) -> int:
    """Create the demo windows unless any window exists; returns how many were created."""
    if QuotaWindow.objects.exists():
        return 0
    moment = now or clock_now()
    admin = User.objects.get(username="admin")
    second = User.objects.get(username="frank")
    nlp = Quota.objects.get(department__slug="nlp", flavor__isnull=True)
    vision = Quota.objects.get(department__slug="vision", flavor__isnull=True)
    preemptible = PriorityClass.objects.get(name="gpu-preemptible")
    quota_window_create(
        actor=admin, quota_id=nlp.pk,
        terms=WindowTerms(kind=WindowKind.RECURRING, begins_at=_today_at(20, BERLIN, moment), rrule=NIGHTLY,
                          timezone=BERLIN, duration_minutes=TWELVE_HOURS, limit_delta=Decimal(4)),
        justification="Training runs at night: four more GPU-equivalents from 20:00 to 08:00 Berlin time.",
    )
    quota_window_create(
        actor=admin, quota_id=nlp.pk,
        terms=WindowTerms(kind=WindowKind.RECURRING, begins_at=_today_at(8, BERLIN, moment), rrule=BY_DAY,
                          timezone=BERLIN, duration_minutes=TWELVE_HOURS, limit=Decimal(4),
                          priority_class_id=preemptible.pk),
        justification="By day, training (preemptible) leaves most of nlp's quota to evaluation: at most 4.",
    )
    begins = _next_monday(moment)
    last = quota_window_create(
        actor=admin, quota_id=vision.pk,
        terms=WindowTerms(kind=WindowKind.TEMPORARY, begins_at=begins, ends_at=begins + datetime.timedelta(days=3),
                          limit_delta=Decimal(4)),
        justification="Vision festival: demo booths and live inference for three days.",
    )
    for window in QuotaWindow.objects.filter(pk__lte=last.pk, state=WindowState.PENDING).order_by("pk"):
        quota_window_approve(actor=second, window_id=window.pk, comment="Demo: the second platform admin agrees.")
    return 3

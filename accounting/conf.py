"""The accounting's settings, read at call time (defaults in ``gpuportal/settings.py``)."""

from __future__ import annotations

import datetime

from django.conf import settings


def late_margin() -> datetime.timedelta:
    """How far back each periodic roll makes the hours again."""
    return datetime.timedelta(hours=int(settings.GPUPORTAL_ACCOUNTING_LATE_HOURS))


def close_margin() -> datetime.timedelta:
    """How long after a month ends its statements close (late data counted first)."""
    return datetime.timedelta(hours=int(settings.GPUPORTAL_ACCOUNTING_CLOSE_MARGIN_HOURS))

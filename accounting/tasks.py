"""Celery tasks of the usage accounting: thin, they call the services."""

from __future__ import annotations

from celery import shared_task

from accounting.rolling import usage_hours_roll_recent


@shared_task
def accounting_usage_roll_task() -> dict[str, object]:
    """The hours that ended within the late-data margin, rolled again (beat, every 5 minutes)."""
    return usage_hours_roll_recent().as_dict()

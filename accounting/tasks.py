"""Celery tasks of the usage accounting: thin, they call the services."""

from __future__ import annotations

from celery import shared_task

from accounting.idle.evaluation import idle_cases_evaluate
from accounting.rolling import usage_hours_roll_recent
from accounting.statements import statements_close_due


@shared_task
def accounting_usage_roll_task() -> dict[str, object]:
    """The hours that ended within the late-data margin, rolled again (beat, every 5 minutes)."""
    return usage_hours_roll_recent().as_dict()


@shared_task
def accounting_statements_close_task() -> list[int]:
    """Last month's statements, once its margin has passed (beat, hourly; nothing when done)."""
    return [statement.pk for statement in statements_close_due()]


@shared_task
def accounting_idle_evaluate_task() -> dict[str, object]:
    """One pass of the idle ladder over every active grant (beat, every 5 minutes)."""
    return idle_cases_evaluate().as_dict()

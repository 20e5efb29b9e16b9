"""The what-if's Celery task: thin, it loads by id and calls the service."""

from __future__ import annotations

from celery import Task, shared_task
from django.db import OperationalError

from whatifs.services import what_if_run


@shared_task(bind=True, acks_late=True, name="whatifs.tasks.what_if_run_task")
def what_if_run_task(self: Task, what_if_id: int) -> str | None:  # type: ignore[type-arg]
    try:
        what_if = what_if_run(what_if_id=what_if_id)
    except OperationalError as error:  # the database went away: try again later
        raise self.retry(exc=error, countdown=min(300, 10 * 2**self.request.retries), max_retries=5) from error
    return None if what_if is None else what_if.state

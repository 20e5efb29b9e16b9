"""The enqueue side of the outbox, called by the services of the apps above in the transaction of
their state change (``notification_enqueue``), and the hand-over to Celery once it commits.

Deliveries are written by the worker (``notifications.delivery.notification_fan_out``), not here:
the state change only inserts one row, reads nothing it locks, and never waits for a mail server.
If the broker is down at commit, the row waits for ``notifications_dispatch`` (beat, or the
in-process sweeper).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import IntegrityError, transaction

from kernel.task_handover import task_hand_over
from notifications.events import Event
from notifications.models import Notification

FAN_OUT_TASK = "notifications.tasks.notification_fan_out_task"
DELIVER_TASK = "notifications.tasks.delivery_send_task"


def notification_enqueue(
    *, event: Event, recipients: Iterable[int], department_id: int | None, subject: str, payload: dict[str, Any],
    dedupe_key: str | None = None,
) -> Notification | None:
    """Write a notification in the current transaction and fan it out once that commits. With a
    ``dedupe_key`` already used, nothing is written (None): the event was notified before."""
    notification = Notification(
        event=event.code, recipients=sorted(set(recipients)), department_id=department_id, subject=subject[:64],
        payload=payload, dedupe_key=dedupe_key,
    )
    if dedupe_key is not None:
        if Notification.objects.filter(dedupe_key=dedupe_key).exists():
            return None
        try:
            with transaction.atomic():
                notification.save()
        except IntegrityError:  # written meanwhile by another transaction
            return None
    else:
        notification.save()
    transaction.on_commit(lambda: task_send(FAN_OUT_TASK, notification.pk))
    return notification


def task_send(name: str, object_id: int, *, countdown: float | None = None) -> bool:
    """Hand work to Celery by task name; False (the row waits for the dispatcher) when the broker
    cannot be reached. Never raises: a broker outage must not fail the request."""
    return task_hand_over(name, object_id, countdown=countdown)

"""Thin tasks: load by id, call a service; retries are scheduled from the delivery row's backoff."""

from __future__ import annotations

from celery import Task, shared_task

from notifications import conf
from notifications.delivery import deliveries_due, delivery_send, notification_fan_out, notifications_unfanned
from notifications.digests import digests_send
from notifications.outbox import DELIVER_TASK, FAN_OUT_TASK, task_send


@shared_task(acks_late=True)
def notification_fan_out_task(notification_id: int) -> int:
    ids = notification_fan_out(notification_id=notification_id)
    for delivery_id in ids:
        task_send(DELIVER_TASK, delivery_id)
    return len(ids)


@shared_task(bind=True, acks_late=True)
def delivery_send_task(self: Task, delivery_id: int) -> None:  # type: ignore[type-arg]
    delay = delivery_send(delivery_id=delivery_id)
    if delay is None or self.request.is_eager:
        return  # in-process tasks cannot wait: the sweeper sends it once it is due
    task_send(DELIVER_TASK, delivery_id, countdown=delay)


@shared_task
def notifications_dispatch_task() -> int:
    """Beat: fan out what the broker never got, and hand every due delivery to a worker."""
    for notification_id in notifications_unfanned():
        task_send(FAN_OUT_TASK, notification_id)
    due = deliveries_due()
    for delivery_id in due:
        task_send(DELIVER_TASK, delivery_id)
    return len(due)


@shared_task
def notification_digests_task() -> int:
    """Beat: today's digests, once the digest hour has come."""
    return digests_send(hour=conf.digest_hour())

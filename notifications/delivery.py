"""The worker's side of the outbox: fan a notification out into one delivery per channel, then
send each delivery once per channel (again only when a send outlives its lease, below).

* Fan-out writes the ``Delivery`` rows of a notification (an e-mail per recipient, as each one's
  preference says: at once, in the digest, or skipped; a row per webhook that takes the event);
  ``(notification, channel)`` is unique and the notification is marked fanned out in the same
  transaction, so fanning out twice writes nothing new.
* Sending claims the row (``SELECT … FOR UPDATE SKIP LOCKED``, a pending row whose lease is free)
  and takes a lease, sends outside any transaction, then marks it sent. A second task for the same
  row finds it leased or sent and does nothing. The one window for a duplicate is a send that
  outlives its lease (a worker that dies after the server accepted the message and before the row is
  marked, or a send slower than ``GPUPORTAL_NOTIFY_LEASE_SECONDS``): another worker then takes the
  row over and sends again. The outcome is written only while the claim holds (the ``attempts`` and
  ``claimed_until`` it claimed with), so a late first worker never overwrites the second's.
  Webhook receivers dedupe on ``X-GPUPortal-Delivery``; e-mails carry it as a header too.
* A failure is retried after an exponential backoff (capped) until ``GPUPORTAL_NOTIFY_MAX_ATTEMPTS``,
  then the row is failed; a permanent failure (a refused address, a 4xx, a host not allowed) fails
  it at once. Failed rows are listed for platform admins (``GET /api/v1/notification-deliveries/``).
"""

from __future__ import annotations

import datetime
import logging
import random
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q, QuerySet

from kernel.clock import clock_now
from notifications import conf, crypto, webhooks
from notifications.events import DIGEST, event_get
from notifications.mail import absolute, mail_send
from notifications.messages import describe
from notifications.models import Delivery, DeliveryState, Mode, Notification, Preference, Webhook
from tenants.access import department_ancestor_ids, department_parent_map

log = logging.getLogger(__name__)

PLATFORM_CHANNEL = "webhook:platform"


def backoff_seconds(attempts: int, *, jitter: float = 0.2) -> float:
    delay = min(conf.backoff_max_seconds(), conf.backoff_base_seconds() * 2.0 ** max(attempts - 1, 0))
    return float(delay * (1 + random.uniform(-jitter, jitter))) if jitter else float(delay)


def _email_rows(notification: Notification, now: datetime.datetime) -> list[Delivery]:
    event = event_get(notification.event)
    recipients = list(notification.recipients)
    chosen = dict(Preference.objects.filter(user_id__in=recipients, event=event.code).values_list("user_id", "mode"))
    people = {row["pk"]: row for row in User.objects.filter(pk__in=recipients).values("pk", "is_active", "email")}
    enabled = conf.email_enabled()
    rows = []
    for user_id in recipients:
        mode = chosen.get(user_id, Mode.IMMEDIATE)
        if event.mandatory and mode == Mode.OFF:
            mode = Mode.IMMEDIATE
        person = people.get(user_id)
        state, why = DeliveryState.PENDING, ""
        if mode == Mode.OFF:
            state, why = DeliveryState.SKIPPED, "turned off by its recipient"
        elif person is None or not person["is_active"] or not person["email"]:
            state, why = DeliveryState.SKIPPED, "no active account with an e-mail address"
        elif not enabled:
            state, why = DeliveryState.SKIPPED, "e-mail is not configured (GPUPORTAL_EMAIL_URL)"
        rows.append(Delivery(notification=notification, channel=f"email:{user_id}", user_id=user_id,
                             mode=Mode.IMMEDIATE if mode == Mode.OFF else mode, state=state, last_error=why,
                             available_at=now))  # fmt: skip
    return rows


def _webhook_rows(notification: Notification, now: datetime.datetime) -> list[Delivery]:
    if notification.event == DIGEST.code:
        return []
    rows = []
    if notification.department_id is not None:
        chain = department_ancestor_ids(department_id=notification.department_id, parents=department_parent_map())
        for hook in Webhook.objects.filter(department_id__in=chain, is_active=True).order_by("pk"):
            if not hook.events or notification.event in hook.events:
                rows.append(Delivery(notification=notification, channel=f"webhook:{hook.pk}", webhook=hook, available_at=now))
    if conf.platform_webhook_url():
        rows.append(Delivery(notification=notification, channel=PLATFORM_CHANNEL, available_at=now))
    return rows


def notification_fan_out(*, notification_id: int) -> list[int]:
    """Write the notification's deliveries (once); returns the ids of those to send now."""
    with transaction.atomic():
        notification = (Notification.objects.select_for_update(skip_locked=True)
                        .filter(pk=notification_id, fanned_out_at__isnull=True).first())  # fmt: skip
        if notification is not None:
            now = clock_now()
            Delivery.objects.bulk_create(
                [*_email_rows(notification, now), *_webhook_rows(notification, now)], ignore_conflicts=True
            )
            Notification.objects.filter(pk=notification.pk).update(fanned_out_at=now)
    return list(Delivery.objects.filter(notification_id=notification_id, state=DeliveryState.PENDING,
                                        mode=Mode.IMMEDIATE).order_by("pk").values_list("pk", flat=True))  # fmt: skip


@transaction.atomic
def _claim(delivery_id: int, *, ignore_schedule: bool) -> Delivery | None:
    now = clock_now()
    delivery = (Delivery.objects.select_for_update(skip_locked=True)
                .filter(pk=delivery_id, state=DeliveryState.PENDING, mode=Mode.IMMEDIATE).first())  # fmt: skip
    if delivery is None:
        return None
    if delivery.claimed_until is not None and delivery.claimed_until > now:
        return None  # another worker holds it
    if not ignore_schedule and delivery.available_at > now:
        return None
    delivery.attempts += 1
    delivery.claimed_until = now + datetime.timedelta(seconds=conf.lease_seconds())
    delivery.save(update_fields=["attempts", "claimed_until"])
    return delivery


def delivery_send(*, delivery_id: int, ignore_schedule: bool = False) -> float | None:
    """Send one delivery if it is due and nobody else holds it. Returns the delay before the next
    attempt when it must be retried; None when it is finished (sent, failed, not ours now)."""
    delivery = _claim(delivery_id, ignore_schedule=ignore_schedule)
    if delivery is None:
        return None
    try:
        _send(delivery)
    except webhooks.SendError as error:
        return _failed(delivery, str(error), permanent=error.permanent)
    except Exception as error:  # a fault of ours: retried like a failure of the receiver
        log.exception("delivery %s failed unexpectedly", delivery.pk)
        return _failed(delivery, f"{error.__class__.__name__}", permanent=False)
    if not _claimed(delivery).update(state=DeliveryState.SENT, sent_at=clock_now(), claimed_until=None, last_error=""):
        _lost(delivery, "sent")
    return None


def _claimed(delivery: Delivery) -> QuerySet[Delivery]:
    """The row as long as this worker's claim holds: still pending, and neither taken over by another
    worker after the lease ran out (``attempts`` and ``claimed_until`` change at every claim)."""
    return Delivery.objects.filter(pk=delivery.pk, state=DeliveryState.PENDING, attempts=delivery.attempts,
                                   claimed_until=delivery.claimed_until)  # fmt: skip


def _lost(delivery: Delivery, outcome: str) -> None:
    """The claim ran out and another worker took the row over (or finished it): its outcome stands."""
    log.warning("delivery %s (%s, attempt %s) %s after its lease of %ss ran out; another worker took it over, "
                "its outcome is kept", delivery.pk, delivery.channel, delivery.attempts, outcome,
                conf.lease_seconds())  # fmt: skip


def _failed(delivery: Delivery, reason: str, *, permanent: bool) -> float | None:
    final = permanent or delivery.attempts >= conf.max_attempts()
    delay = None if final else backoff_seconds(delivery.attempts)
    fields: dict[str, Any] = {"last_error": reason[:1000], "claimed_until": None}
    if final:
        fields["state"] = DeliveryState.FAILED
    else:
        assert delay is not None
        fields["available_at"] = clock_now() + datetime.timedelta(seconds=delay)
    if not _claimed(delivery).update(**fields):
        _lost(delivery, f"failed ({reason})")
        return None
    log.warning("delivery %s (%s, attempt %s) failed%s: %s", delivery.pk, delivery.channel, delivery.attempts,
                "" if delay is None else f", retry in {delay:.0f}s", reason)  # fmt: skip
    return delay


def delivery_key(delivery: Delivery) -> str:
    return f"gpuportal-delivery-{delivery.pk}"


def _send(delivery: Delivery) -> None:
    notification = Notification.objects.get(pk=delivery.notification_id)
    message = describe(notification.event, notification.payload)
    key = delivery_key(delivery)
    if delivery.channel.startswith("email:"):
        user = User.objects.filter(pk=delivery.user_id or 0, is_active=True).exclude(email="").first()
        if user is None:
            raise webhooks.SendError("no active account with an e-mail address", permanent=True)
        items = notification.payload.get("items") if notification.event == DIGEST.code else None
        mail_send(to=user.email, user_id=user.pk, event=notification.event, message=message, delivery_key=key,
                  items=[{**item, "link": absolute(item.get("path", ""))} for item in items or []])
        return
    target = _webhook_target(delivery)
    now = clock_now()
    body = webhooks.body_for(format=target.format, delivery_key=key, event=notification.event, message=message,
                             link=absolute(message.path), notification=_public(notification), sent_at=now)  # fmt: skip
    webhooks.post(target=target, body=body, delivery_key=key, event=notification.event, sent_at=now)


def _public(notification: Notification) -> dict[str, Any]:
    return {"notification": notification.pk, "created_at": notification.created_at.isoformat(),
            "department_id": notification.department_id, "subject": notification.subject, "data": notification.payload}


def _webhook_target(delivery: Delivery) -> webhooks.Target:
    if delivery.channel == PLATFORM_CHANNEL:
        url = conf.platform_webhook_url()
        if url is None:
            raise webhooks.SendError("GPUPORTAL_WEBHOOK_URL is no longer set", permanent=True)
        return webhooks.Target(url=url, format=conf.platform_webhook_format(), secret=conf.platform_webhook_secret(),
                               checked=False)  # fmt: skip
    hook = Webhook.objects.filter(pk=delivery.webhook_id, is_active=True).first() if delivery.webhook_id else None
    if hook is None:
        raise webhooks.SendError("the webhook was removed or turned off", permanent=True)
    return webhooks.Target(url=crypto.open_text(bytes(hook.url_encrypted)), format=hook.format,
                           secret=crypto.open_text(bytes(hook.secret_encrypted)))


def deliveries_due(*, now: datetime.datetime | None = None, limit: int = 500) -> list[int]:
    moment = now or clock_now()
    return list(
        Delivery.objects.filter(state=DeliveryState.PENDING, mode=Mode.IMMEDIATE, available_at__lte=moment)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=moment))
        .order_by("pk").values_list("pk", flat=True)[:limit]
    )


def notifications_unfanned(*, older_than_seconds: float = 10.0, limit: int = 500) -> list[int]:
    cutoff = clock_now() - datetime.timedelta(seconds=older_than_seconds)
    return list(Notification.objects.filter(fanned_out_at__isnull=True, created_at__lte=cutoff)
                .order_by("pk").values_list("pk", flat=True)[:limit])  # fmt: skip




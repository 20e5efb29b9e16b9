"""The daily digest: once a day, at ``GPUPORTAL_NOTIFY_DIGEST_HOUR`` (UTC), every person's e-mails
waiting for the digest become one e-mail, a notification of its own (``digest``) delivered like any
other. The waiting rows are marked ``digested`` with a link to it in the same transaction, so a
second run the same day finds nothing left to gather."""

from __future__ import annotations

import datetime
from collections import defaultdict

from django.db import transaction

from kernel.clock import clock_now
from notifications.events import DIGEST
from notifications.messages import describe
from notifications.models import Delivery, DeliveryState, Mode, Notification
from notifications.outbox import notification_enqueue


def digest_cutoff(*, now: datetime.datetime, hour: int) -> datetime.datetime | None:
    """The moment up to which today's digest gathers, or None before today's digest hour."""
    today = now.astimezone(datetime.UTC).replace(hour=hour, minute=0, second=0, microsecond=0)
    return today if now >= today else None


def digests_send(*, now: datetime.datetime | None = None, hour: int) -> int:
    """Gather every person's digest e-mails written before today's digest hour into one digest
    each; returns how many digests were written."""
    moment = now or clock_now()
    cutoff = digest_cutoff(now=moment, hour=hour)
    if cutoff is None:
        return 0
    written = 0
    users = (Delivery.objects.filter(state=DeliveryState.PENDING, mode=Mode.DIGEST, created_at__lt=cutoff)
             .values_list("user_id", flat=True).distinct())  # fmt: skip
    for user_id in sorted({u for u in users if u is not None}):
        written += digest_write(user_id=user_id, cutoff=cutoff)
    return written


@transaction.atomic
def digest_write(*, user_id: int, cutoff: datetime.datetime) -> int:
    rows = list(
        Delivery.objects.select_for_update(skip_locked=True)
        .filter(user_id=user_id, state=DeliveryState.PENDING, mode=Mode.DIGEST, created_at__lt=cutoff)
        .order_by("pk")
    )
    if not rows:
        return 0
    notes = {n.pk: n for n in Notification.objects.filter(pk__in=[row.notification_id for row in rows])}
    by_event: dict[str, list[Notification]] = defaultdict(list)
    for row in rows:
        by_event[notes[row.notification_id].event].append(notes[row.notification_id])
    items = []
    for event in sorted(by_event):
        for note in sorted(by_event[event], key=lambda n: n.pk):
            message = describe(note.event, note.payload)
            items.append({"event": event, "title": message.title, "lines": message.lines, "path": message.path,
                          "at": note.created_at.isoformat()})  # fmt: skip
    digest = notification_enqueue(
        event=DIGEST, recipients=[user_id], department_id=None, subject=f"digest:{cutoff.date().isoformat()}",
        payload={"items": items, "day": cutoff.date().isoformat()},
        dedupe_key=f"digest:{user_id}:{cutoff.isoformat()}",
    )
    if digest is None:  # today's digest for this person was written by another run: theirs gathered the rows
        return 0
    Delivery.objects.filter(pk__in=[row.pk for row in rows]).update(
        state=DeliveryState.DIGESTED, digest=digest, sent_at=clock_now()
    )
    return 1

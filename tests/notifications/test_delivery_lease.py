"""A send that outlives its lease: another worker takes the delivery over, and the first worker,
finishing late, does not overwrite the row (its claim is gone). The lease runs out by moving the
row's ``claimed_until`` into the past from inside the first worker's send."""

from __future__ import annotations

import datetime
import logging

import pytest
from django.utils import timezone

from notifications import delivery as delivery_module
from notifications.delivery import delivery_send, notification_fan_out
from notifications.models import Delivery, DeliveryState, Notification
from notifications.services import webhook_create
from tests.conftest import World
from tests.notifications.conftest import Receiver
from tests.notifications.test_delivery import _request

pytestmark = pytest.mark.django_db


def _pending_webhook_delivery(world: World, receiver: Receiver) -> Delivery:
    hook, _ = webhook_create(actor=world.users["platform"], department_id=world.nlp.pk, name="ops", url=receiver.url())
    _request(world)  # its on-commit sends never run here: the test sends by hand
    notification_fan_out(notification_id=Notification.objects.get(event="allocation.submitted").pk)
    return Delivery.objects.get(channel=f"webhook:{hook.pk}", state=DeliveryState.PENDING, attempts=0)


def _lease_runs_out(delivery_id: int) -> None:
    Delivery.objects.filter(pk=delivery_id).update(claimed_until=timezone.now() - datetime.timedelta(seconds=1))


def test_a_first_worker_finishing_after_a_takeover_leaves_the_second_workers_outcome(
    world: World, receiver: Receiver, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    delivery = _pending_webhook_delivery(world, receiver)
    receiver.script = [200, 500]  # the first worker's call is accepted, the second worker's fails
    original = delivery_module._send
    nested: list[float | None] = []

    def slow_first_send(claimed: Delivery) -> None:
        original(claimed)
        if not nested:  # the first worker, still busy after the server accepted its call
            _lease_runs_out(claimed.pk)
            nested.append(delivery_send(delivery_id=claimed.pk))  # the second worker takes over

    monkeypatch.setattr(delivery_module, "_send", slow_first_send)
    with caplog.at_level(logging.WARNING, logger="notifications.delivery"):
        assert delivery_send(delivery_id=delivery.pk) is None

    delivery.refresh_from_db()
    assert nested[0] is not None  # the second worker scheduled its retry
    assert (delivery.state, delivery.attempts, delivery.last_error) == (DeliveryState.PENDING, 2, "HTTP 500: ok")
    assert delivery.sent_at is None and delivery.available_at > timezone.now()
    assert len(receiver.requests) == 2  # the duplicate that remains possible, with one delivery key
    assert len({call.headers["X-GPUPortal-Delivery"] for call in receiver.requests}) == 1
    assert any("another worker took it over" in record.getMessage() for record in caplog.records)


def test_a_first_worker_finishing_while_the_second_still_sends_leaves_the_row_to_the_second(
    world: World, receiver: Receiver, monkeypatch: pytest.MonkeyPatch,
) -> None:
    delivery = _pending_webhook_delivery(world, receiver)
    receiver.script = [500]  # the first worker fails late; it must not schedule a retry over the second's claim
    original = delivery_module._send
    second: list[Delivery | None] = []

    def slow_first_send(claimed: Delivery) -> None:
        try:
            original(claimed)
        finally:
            _lease_runs_out(claimed.pk)
            second.append(delivery_module._claim(claimed.pk, ignore_schedule=False))  # claimed, not finished

    monkeypatch.setattr(delivery_module, "_send", slow_first_send)
    assert delivery_send(delivery_id=delivery.pk) is None  # not the first worker's to retry any more

    held = second[0]
    assert held is not None
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.last_error) == (DeliveryState.PENDING, 2, "")
    assert delivery.claimed_until == held.claimed_until  # still the second worker's lease

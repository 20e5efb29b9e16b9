"""Each event reaches the people it is for, written with the state change it tells about: expiry
notices once per threshold, scheduled starts, reclaims, failed pushes; and under concurrency, a
hundred tasks for one delivery send it once (PostgreSQL)."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from accounting.idle.evaluation import idle_cases_evaluate
from accounting.idle_models import IdleAction
from allocations.grants import services
from allocations.grants.notices import allocations_expiry_notices
from allocations.grants.reclaims import allocation_reclaim_idle
from allocations.grants.scheduling import allocations_start_due
from allocations.grants.transitions import allocation_lock
from allocations.models import Allocation
from clusters.models import ClusterPush
from delivery.drivers import PermanentDriverError
from delivery.outbox import push_deliver
from notifications.delivery import delivery_send, notification_fan_out
from notifications.email_url import email_settings
from notifications.models import Delivery, DeliveryState, Notification
from notifications.services import webhook_create
from tenants.models import Membership, Role
from tests.accounting.test_idle_cases import HOUR, active_grant, busy_then_idle, moment, policy
from tests.conftest import World, build_world, requires_postgres
from tests.notifications.conftest import Receiver
from tests.threads import all_at_once

POSTGRES: pytest.MarkDecorator = requires_postgres()


def _request(world: World, *, start: datetime.datetime | None = None, days: int = 2) -> Allocation:
    begin = start or timezone.now()
    return services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=1, priority_class=world.standard,
        starts_at=begin, ends_at=begin + datetime.timedelta(days=days), justification="x",
    )


def _notified(event: str) -> list[tuple[list[int], dict[str, Any]]]:
    return [(n.recipients, n.payload) for n in Notification.objects.filter(event=event).order_by("pk")]


@pytest.mark.django_db
def test_expiry_notices_come_7_then_1_day_ahead_each_once(world: World) -> None:
    allocation = services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=_request(world, days=10).pk)
    now = timezone.now()
    assert allocations_expiry_notices(now=now) == 0  # 10 days left
    assert allocations_expiry_notices(now=allocation.ends_at - datetime.timedelta(days=5)) == 1
    assert allocations_expiry_notices(now=allocation.ends_at - datetime.timedelta(days=4)) == 0  # never twice
    assert allocations_expiry_notices(now=allocation.ends_at - datetime.timedelta(hours=20)) == 1
    assert allocations_expiry_notices(now=allocation.ends_at - datetime.timedelta(hours=2)) == 0
    owner = world.users["nlp_member"].pk
    assert [(r, p["days"]) for r, p in _notified("allocation.expiring")] == [([owner], 7), ([owner], 1)]


@pytest.mark.django_db
def test_a_grant_found_within_a_day_gets_only_the_one_day_notice(world: World) -> None:
    allocation = services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=_request(world, days=1).pk)
    assert allocations_expiry_notices(now=allocation.starts_at + datetime.timedelta(hours=1)) == 1
    assert [p["days"] for _, p in _notified("allocation.expiring")] == [1]


@pytest.mark.django_db
def test_a_scheduled_start_and_a_reclaim_are_told_to_the_owner(world: World) -> None:
    later = timezone.now() + datetime.timedelta(days=1)
    allocation = services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=_request(world, start=later).pk)
    assert allocations_start_due(now=later + datetime.timedelta(minutes=1)) == 1
    owner = world.users["nlp_member"].pk
    assert [(r, p["allocation"]) for r, p in _notified("allocation.started")] == [([owner], allocation.pk)]

    with transaction.atomic():
        row = allocation_lock(allocation.pk)
        for write in allocation_reclaim_idle(row=row, now=timezone.now(), reason="Idle for 3 hours.", case_id=1):
            write()
    [(recipients, payload)] = _notified("allocation.reclaim_notice")
    assert recipients == [owner] and payload["reason"] == "Idle for 3 hours." and payload["notice_minutes"] >= 0


@pytest.mark.django_db
def test_a_push_that_fails_for_good_is_told_to_platform_admins(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**_: Any) -> None:
        raise PermanentDriverError("forbidden: the service account may not create namespaces")

    monkeypatch.setattr("delivery.outbox.cluster_sync_project", refuse)
    monkeypatch.setattr("delivery.outbox.cluster_sync_shared", refuse)
    allocation = services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=_request(world).pk)
    push = ClusterPush.objects.filter(allocation=allocation).get()
    assert push_deliver(push_id=push.pk) is None
    allocation.refresh_from_db()
    assert allocation.state == "failed"
    [(recipients, payload)] = _notified("cluster.push_failed")
    assert recipients == [world.users["platform"].pk]
    assert payload["allocation"] == allocation.pk and payload["cluster"] == world.cluster.name
    assert payload["error"] == "forbidden: the service account may not create namespaces"


def test_the_email_url_becomes_djangos_smtp_settings() -> None:
    assert email_settings("smtp+starttls://me%40x.org:p%3Ass@mail.x.org", timeout=3) == {
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend", "EMAIL_HOST": "mail.x.org", "EMAIL_PORT": 587,
        "EMAIL_HOST_USER": "me@x.org", "EMAIL_HOST_PASSWORD": "p:ss", "EMAIL_USE_TLS": True, "EMAIL_USE_SSL": False,
        "EMAIL_TIMEOUT": 3,
    }
    assert email_settings("smtps://mail.x.org", timeout=3)["EMAIL_PORT"] == 465
    assert email_settings("smtp://localhost:2525", timeout=3)["EMAIL_USE_TLS"] is False
    assert email_settings(None, timeout=3) == {"EMAIL_BACKEND": "django.core.mail.backends.dummy.EmailBackend"}
    with pytest.raises(ValueError, match="GPUPORTAL_EMAIL_URL"):
        email_settings("https://mail.x.org", timeout=3)


def verify(secret: str, body: bytes, signature: str, timestamp: str, *, now: float, tolerance: int = 300) -> bool:
    """The receiver's check, as docs/notifications.md shows it."""
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    sent_at = datetime.datetime.fromisoformat(json.loads(body)["sent_at"]).timestamp()
    return (hmac.compare_digest(expected, signature) and abs(now - int(timestamp)) <= tolerance
            and abs(sent_at - int(timestamp)) < 2)  # fmt: skip


@POSTGRES
@pytest.mark.django_db(transaction=True)
def test_a_hundred_concurrent_tasks_for_one_delivery_send_it_once(receiver: Receiver) -> None:
    world = build_world()
    hook, secret = webhook_create(actor=world.users["platform"], department_id=world.nlp.pk, name="ops", url=receiver.url())
    receiver.script = [500]  # the first attempt fails: the others retry it, only one of them may send
    _request(world)  # outside a test transaction: the fan-out and first send ran at commit
    delivery = Delivery.objects.get(channel=f"webhook:{hook.pk}")
    assert (delivery.state, delivery.attempts) == (DeliveryState.PENDING, 1)
    assert notification_fan_out(notification_id=delivery.notification_id) == [delivery.pk]

    def job() -> Callable[[], str]:
        return lambda: str(delivery_send(delivery_id=delivery.pk, ignore_schedule=True))

    outcomes = all_at_once([job() for _ in range(100)])
    assert outcomes == {"None": 100}
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts) == (DeliveryState.SENT, 2)
    assert len(receiver.requests) == 2  # the failed first attempt, and exactly one more
    call = receiver.requests[1]
    assert verify(secret, call.body, call.headers["X-GPUPortal-Signature"], call.headers["X-GPUPortal-Timestamp"],
                  now=timezone.now().timestamp())  # fmt: skip
    assert not verify("another-secret", call.body, call.headers["X-GPUPortal-Signature"],
                      call.headers["X-GPUPortal-Timestamp"], now=timezone.now().timestamp())  # fmt: skip


@pytest.mark.django_db
def test_a_request_with_no_department_admin_up_the_tree_goes_to_platform_admins(world: World) -> None:
    Membership.objects.filter(role=Role.DEPARTMENT_ADMIN).delete()
    _request(world)
    assert [recipients for recipients, _ in _notified("allocation.submitted")] == [[world.users["platform"].pk]]


@pytest.mark.django_db
def test_an_idle_warning_is_told_to_the_grants_owner(world: World) -> None:
    now = moment()
    held = active_grant(world, since=now - 6 * HOUR)
    policy(action=IdleAction.NOTIFY, window_minutes=30, grace_minutes=10)
    busy_then_idle(held, now=now, idle=3 * HOUR)
    idle_cases_evaluate(now=now)
    idle_cases_evaluate(now=now + HOUR)
    [(recipients, payload)] = _notified("allocation.idle_warning")
    assert recipients == [held.requested_by_id]
    assert (payload["allocation"], payload["policy"], payload["action"]) == (held.pk, "default", "notify")


def test_messages_show_times_as_people_read_them_and_payloads_keep_the_exact_time() -> None:
    from kernel.times import time_readable as when
    from notifications.messages import describe

    payload = {"allocation": 16, "quantity": 1, "flavor": "a100-80gb", "project": "nlp-llm", "requested_by": "alice",
               "starts_at": "2026-12-02T15:55:30.588661+00:00", "ends_at": "2026-12-16T17:55:30+02:00",
               "justification": "fine-tuning"}
    message = describe("allocation.submitted", payload)
    assert "From 2026-12-02 15:55 UTC to 2026-12-16 15:55 UTC." in message.lines
    assert payload["starts_at"] == "2026-12-02T15:55:30.588661+00:00"
    assert when(None) == "None" and when("soon") == "soon"


def test_messages_count_in_the_singular_and_the_plural() -> None:
    from notifications.messages import describe

    grant = {"allocation": 16, "quantity": 1, "flavor": "a100-80gb", "project": "nlp-llm", "ends_at": "2026-12-16T15:55:00+00:00"}
    assert describe("allocation.expiring", {**grant, "days": 1}).title.endswith("ends in 1 day")
    assert describe("allocation.expiring", {**grant, "days": 3}).title.endswith("ends in 3 days")
    assert describe("digest", {"items": [{"title": "one"}]}).title == "Your GPU Portal digest: 1 notification"

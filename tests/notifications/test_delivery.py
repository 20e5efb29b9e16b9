"""Notifications end to end, against a real SMTP server and a real HTTP receiver: who gets what,
the webhook's signature, retries that deliver once, the allow-list, redirects, and what is stored."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation
from notifications.delivery import delivery_send, notification_fan_out
from notifications.models import Delivery, DeliveryState, Notification, Webhook
from notifications.services import webhook_create
from notifications.tasks import notifications_dispatch_task
from tests.conftest import World
from tests.notifications.conftest import Receiver

pytestmark = pytest.mark.django_db


def _request(world: World, persona: str = "nlp_member") -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users[persona], project=world.llm, flavor=world.a100, quantity=1, priority_class=world.standard,
        starts_at=start, ends_at=start + datetime.timedelta(days=2), justification="fine-tuning",
    )


def _signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def test_a_request_through_the_api_mails_the_departments_admins_and_calls_its_webhook_signed(
    mailed_world: World, smtp: Any, receiver: Receiver, django_capture_on_commit_callbacks: Any,
) -> None:
    world = mailed_world
    hook, secret = webhook_create(actor=world.users["nlp_admin"], department_id=world.nlp.pk, name="ops",
                                  url=receiver.url("/hook?token=abc"))
    body = {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": 1, "justification": "training", **world.window()}
    with django_capture_on_commit_callbacks(execute=True):
        response = world.client("nlp_member").post("/api/v1/allocations/", body, format="json")
    assert response.status_code == 201, response.content
    allocation_id = response.json()["id"]

    # nlp has its own admin: the mail goes to them, not to acme's platform admin, nor to the requester
    mails = smtp.to("nlp_admin@example.org")
    assert len(mails) == 1
    assert len(smtp.messages) == 1
    mail = mails[0]
    assert mail["Subject"].strip() == f"[GPU Portal] Request #{allocation_id} (1 × a100 for nlp-llm) waits for your decision"
    text = mail.get_body(preferencelist=("plain",)).get_content()
    html = mail.get_body(preferencelist=("html",)).get_content()
    assert "Requested by nlp_member." in text and "Justification: training" in text
    assert "https://gpu.example.org/approvals/" in text and 'href="https://gpu.example.org/approvals/"' in html
    assert mail["List-Unsubscribe"] is None  # a request waiting for a decision cannot be turned off

    assert len(receiver.requests) == 1
    call = receiver.requests[0]
    assert call.path == "/hook?token=abc"
    assert call.headers["X-GPUPortal-Signature"] == _signature(secret, call.body)
    assert call.headers["X-GPUPortal-Event"] == "allocation.submitted"
    sent = json.loads(call.body)
    assert sent["event"] == "allocation.submitted"
    assert sent["data"]["allocation"] == allocation_id and sent["data"]["requested_by"] == "nlp_member"
    assert sent["delivery"] == call.headers["X-GPUPortal-Delivery"]
    assert abs(int(call.headers["X-GPUPortal-Timestamp"]) - timezone.now().timestamp()) < 60
    assert sent["url"] == "https://gpu.example.org/approvals/"
    assert set(Delivery.objects.values_list("channel", "state")) == {
        (f"email:{world.users['nlp_admin'].pk}", DeliveryState.SENT), (f"webhook:{hook.pk}", DeliveryState.SENT),
    }


def test_the_decision_goes_to_the_requester_and_a_department_without_admins_escalates_to_its_parent(
    mailed_world: World, smtp: Any, django_capture_on_commit_callbacks: Any,
) -> None:
    world = mailed_world
    with django_capture_on_commit_callbacks(execute=True):
        allocation = _request(world)
    with django_capture_on_commit_callbacks(execute=True):
        services.allocation_reject(actor=world.users["nlp_admin"], allocation_id=allocation.pk, comment="too big")
    decided = smtp.to("nlp_member@example.org")
    assert [m["Subject"].strip() for m in decided] == [f"[GPU Portal] Your request #{allocation.pk} (1 × a100 for nlp-llm) was rejected"]
    assert "Comment: too big" in decided[0].get_body(preferencelist=("plain",)).get_content()

    # nlp-speech has no admin of its own: nlp's admins get its requests
    with django_capture_on_commit_callbacks(execute=True):
        services.allocation_request(
            actor=world.users["speech_member"], project=world.speech_project, flavor=world.a100, quantity=1,
            priority_class=world.standard, starts_at=timezone.now(), ends_at=timezone.now() + datetime.timedelta(days=1),
            justification="asr",
        )
    assert len(smtp.to("nlp_admin@example.org")) == 2


def test_a_webhook_failing_with_500_then_answering_200_is_delivered_once(
    world: World, receiver: Receiver, django_capture_on_commit_callbacks: Any,
) -> None:
    hook, _ = webhook_create(actor=world.users["platform"], department_id=world.nlp.pk, name="ops", url=receiver.url())
    receiver.script = [500]
    with django_capture_on_commit_callbacks(execute=True):
        _request(world)
    delivery = Delivery.objects.get(channel=f"webhook:{hook.pk}")
    assert (delivery.state, delivery.attempts, delivery.last_error) == (DeliveryState.PENDING, 1, "HTTP 500: ok")
    assert delivery.available_at > timezone.now()  # the backoff

    notifications_dispatch_task.apply()  # not due yet: nothing is sent
    assert len(receiver.requests) == 1
    Delivery.objects.filter(pk=delivery.pk).update(available_at=timezone.now() - datetime.timedelta(seconds=1))
    for _ in range(5):  # the dispatcher, then stray retries of the same task
        notifications_dispatch_task.apply()
        delivery_send(delivery_id=delivery.pk)
        delivery_send(delivery_id=delivery.pk, ignore_schedule=True)
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.last_error) == (DeliveryState.SENT, 2, "")
    assert len(receiver.requests) == 2
    assert len({call.headers["X-GPUPortal-Delivery"] for call in receiver.requests}) == 1  # the receiver can dedupe


def test_a_webhook_gives_up_after_its_last_attempt_and_a_4xx_at_once(
    world: World, receiver: Receiver, settings: Any, django_capture_on_commit_callbacks: Any,
) -> None:
    settings.GPUPORTAL_NOTIFY_MAX_ATTEMPTS = 3
    webhook_create(actor=world.users["platform"], department_id=world.nlp.pk, name="ops", url=receiver.url())
    receiver.script = [503, 503, 503, 503]
    with django_capture_on_commit_callbacks(execute=True):
        _request(world)
    delivery = Delivery.objects.get(channel__startswith="webhook:")
    while delivery_send(delivery_id=delivery.pk, ignore_schedule=True) is not None:
        pass
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts) == (DeliveryState.FAILED, 3)
    assert len(receiver.requests) == 3
    listed = world.client("platform").get("/api/v1/notification-deliveries/", {"state": "failed"}).json()
    assert [(row["id"], row["event"], row["last_error"]) for row in listed["results"]] == [
        (delivery.pk, "allocation.submitted", "HTTP 503: ok")
    ]

    receiver.script = [404]
    with django_capture_on_commit_callbacks(execute=True):
        _request(world)
    second = Delivery.objects.filter(channel__startswith="webhook:").latest("pk")
    assert (second.state, second.attempts) == (DeliveryState.FAILED, 1)


def test_a_redirect_is_not_followed(world: World, receiver: Receiver, django_capture_on_commit_callbacks: Any) -> None:
    webhook_create(actor=world.users["platform"], department_id=world.nlp.pk, name="ops", url=receiver.url())
    receiver.script = [302]
    with django_capture_on_commit_callbacks(execute=True):
        _request(world)
    delivery = Delivery.objects.get(channel__startswith="webhook:")
    assert delivery.state == DeliveryState.FAILED
    assert delivery.last_error == "HTTP 302: redirects are not followed"
    assert [call.path for call in receiver.requests] == ["/hook"]  # /elsewhere was never asked


def test_a_host_off_the_allow_list_is_refused_at_creation_and_at_send(
    world: World, receiver: Receiver, settings: Any, django_capture_on_commit_callbacks: Any,
) -> None:
    client = world.client("nlp_admin")
    url = f"/api/v1/departments/{world.nlp.pk}/webhooks/"
    for bad, why in [
        ("https://evil.example.net/hook", "not on the webhook allow-list"),
        ("http://hooks.example.org/hook", "Scheme not allowed: plain http is not allowed"),
        ("https://user:pw@hooks.example.org/hook", "user name or password"),
    ]:
        settings.GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.org"]
        response = client.post(url, {"name": "x", "url": bad}, format="json")
        assert response.status_code == 400, bad
        assert list(response.json()["error"]["fields"]) == ["url"]
        assert why in response.json()["error"]["fields"]["url"][0]
    settings.GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = ["*.example.org", f"http://127.0.0.1:{receiver.port}"]
    assert client.post(url, {"name": "sub", "url": "https://a.hooks.example.org/x"}, format="json").status_code == 201
    assert client.post(url, {"name": "apex", "url": "https://example.org/x"}, format="json").status_code == 400

    created = client.post(url, {"name": "local", "url": receiver.url()}, format="json")
    assert created.status_code == 201
    Webhook.objects.exclude(pk=created.json()["id"]).delete()
    settings.GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.org"]  # narrowed after the webhook was stored
    with django_capture_on_commit_callbacks(execute=True):
        _request(world)
    delivery = Delivery.objects.get(channel__startswith="webhook:")
    assert delivery.state == DeliveryState.FAILED
    assert "not on the webhook allow-list" in delivery.last_error
    assert receiver.requests == []


def test_the_url_and_secret_are_encrypted_at_rest_and_answered_redacted(world: World, settings: Any) -> None:
    url = "https://hooks.example.org/services/T000/B000/very-secret-token"
    response = world.client("nlp_admin").post(
        f"/api/v1/departments/{world.nlp.pk}/webhooks/", {"name": "chat", "url": url, "format": "slack"}, format="json",
    )
    assert response.status_code == 201
    answer = response.json()
    secret = answer.pop("secret")
    assert len(secret) >= 40
    assert answer["url"] == "https://hooks.example.org/…" and answer["host"] == "hooks.example.org"
    with connection.cursor() as cursor:
        cursor.execute("SELECT url_encrypted, secret_encrypted FROM notifications_webhook WHERE id = %s", [answer["id"]])
        raw_url, raw_secret = (bytes(value) for value in cursor.fetchone())
    assert b"very-secret-token" not in raw_url and b"hooks.example.org" not in raw_url
    assert secret.encode() not in raw_secret
    listed = world.client("nlp_admin").get(f"/api/v1/departments/{world.nlp.pk}/webhooks/").json()
    assert "very-secret-token" not in json.dumps(listed) and secret not in json.dumps(listed)
    from audit.models import AuditEvent

    event = AuditEvent.objects.get(action="webhook.created")
    assert "very-secret-token" not in json.dumps([event.before, event.after, event.details])


def test_slack_and_mattermost_get_their_own_formats_and_the_platform_webhook_gets_every_event(
    world: World, receiver: Receiver, settings: Any, django_capture_on_commit_callbacks: Any,
) -> None:
    webhook_create(actor=world.users["platform"], department_id=world.acme.pk, name="slack", url=receiver.url("/slack"),
                   format="slack", events=["allocation.submitted"])
    webhook_create(actor=world.users["platform"], department_id=world.nlp.pk, name="mm", url=receiver.url("/mm"),
                   format="mattermost", events=["allocation.expired"])  # not this event
    settings.GPUPORTAL_WEBHOOK_URL = receiver.url("/platform")
    settings.GPUPORTAL_WEBHOOK_SECRET = "platform-secret"
    with django_capture_on_commit_callbacks(execute=True):
        allocation = _request(world)
    calls = {call.path: call for call in receiver.requests}
    assert set(calls) == {"/slack", "/platform"}  # acme's webhook sees its subtree's events
    slack = json.loads(calls["/slack"].body)
    assert slack["text"].startswith(f"Request #{allocation.pk} (1 × a100 for nlp-llm) waits for your decision")
    assert slack["blocks"][0]["type"] == "section"
    assert "X-GPUPortal-Signature" not in calls["/slack"].headers
    assert calls["/platform"].headers["X-GPUPortal-Signature"] == _signature("platform-secret", calls["/platform"].body)

    receiver.requests.clear()
    settings.GPUPORTAL_WEBHOOK_URL = None
    with django_capture_on_commit_callbacks(execute=True):
        services.allocations_expire(now=allocation.ends_at + datetime.timedelta(seconds=1))
    mattermost = json.loads(receiver.requests[0].body)
    assert [call.path for call in receiver.requests] == ["/mm"]
    assert mattermost["username"] == "GPU Portal" and mattermost["text"].startswith("**Your request")


def test_a_notification_fanned_out_twice_writes_its_deliveries_once(
    mailed_world: World, smtp: Any, django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        _request(mailed_world)
    notification = Notification.objects.get(event="allocation.submitted")
    Notification.objects.filter(pk=notification.pk).update(fanned_out_at=None)  # as if the first run died
    assert notification_fan_out(notification_id=notification.pk) == []  # its one e-mail is already sent
    assert Delivery.objects.count() == 1
    assert len(smtp.messages) == 1


def test_a_webhook_allowed_over_plain_http_is_answered_with_http_still_redacted(world: World, settings: Any) -> None:
    settings.GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = ["http://chat.internal:8065", "hooks.example.org"]
    client = world.client("nlp_admin")
    base = f"/api/v1/departments/{world.nlp.pk}/webhooks/"
    plain = client.post(base, {"name": "chat", "url": "http://chat.internal:8065/hooks/secret-token"}, format="json")
    tls = client.post(base, {"name": "ops", "url": "https://hooks.example.org/services/T0/secret"}, format="json")
    assert plain.status_code == 201 and tls.status_code == 201, (plain.content, tls.content)
    assert plain.json()["url"] == "http://chat.internal/…" and tls.json()["url"] == "https://hooks.example.org/…"
    listed = {row["name"]: row["url"] for row in client.get(base).json()["results"]}
    assert listed == {"chat": "http://chat.internal/…", "ops": "https://hooks.example.org/…"}
    assert client.get(f"/api/v1/webhooks/{plain.json()['id']}/").json()["url"] == "http://chat.internal/…"
    assert "secret" not in json.dumps(listed)

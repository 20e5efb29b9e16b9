"""Preferences: opt-outs honoured except for approval events, daily digests that gather a person's
events into one e-mail, the unsubscribe link, and the portal page."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation
from audit.models import AuditEvent
from notifications.delivery import delivery_send
from notifications.digests import digests_send
from notifications.mail import unsubscribe_token
from notifications.models import Delivery, DeliveryState, Mode, Notification, Preference
from notifications.tasks import notifications_dispatch_task
from tests.conftest import World

pytestmark = pytest.mark.django_db


def _grant(world: World) -> Allocation:
    start = timezone.now()
    allocation = services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=1, priority_class=world.standard,
        starts_at=start, ends_at=start + datetime.timedelta(days=2), justification="x",
    )
    return services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)


def test_the_api_reads_and_replaces_preferences_and_refuses_turning_off_an_approval_event(world: World) -> None:
    client = world.client("nlp_member")
    url = "/api/v1/me/notification-preferences/"
    assert client.get(url).json()["allocation.expiring"] == "immediate"
    answer = client.put(url, {"allocation.expiring": "digest", "allocation.idle_warning": "off"}, format="json")
    assert answer.status_code == 200
    assert (answer.json()["allocation.expiring"], answer.json()["allocation.idle_warning"]) == ("digest", "off")
    assert answer.json()["allocation.decided"] == "immediate"
    event = AuditEvent.objects.get(action="notification.preferences_set")
    assert event.after == {"allocation.expiring": "digest", "allocation.idle_warning": "off"}

    refused = client.put(url, {"allocation.decided": "off"}, format="json")
    assert refused.status_code == 400
    assert list(refused.json()["error"]["fields"]) == ["allocation.decided"]
    assert client.put(url, {"allocation.decided": "digest"}, format="json").status_code == 200  # a digest is allowed
    unknown = client.put(url, {"allocation.nothing": "off", "allocation.expired": "sometimes"}, format="json")
    assert unknown.status_code == 400
    assert set(unknown.json()["error"]["fields"]) == {"allocation.nothing", "allocation.expired"}
    # a PUT replaces: what it leaves out comes at once again
    assert client.get(url).json() == {**{code: "immediate" for code in client.get(url).json()}, "allocation.decided": "digest"}


def test_an_opt_out_is_honoured_but_an_approval_event_is_sent_anyway(
    mailed_world: World, smtp: Any, django_capture_on_commit_callbacks: Any,
) -> None:
    world = mailed_world
    member = world.users["nlp_member"]
    Preference.objects.create(user=member, event="allocation.expired", mode=Mode.OFF)
    Preference.objects.create(user=member, event="allocation.decided", mode=Mode.OFF)  # stored by hand: still sent
    with django_capture_on_commit_callbacks(execute=True):
        allocation = _grant(world)
    with django_capture_on_commit_callbacks(execute=True):
        services.allocations_expire(now=allocation.ends_at + datetime.timedelta(seconds=1))
    subjects = [m["Subject"].strip() for m in smtp.to("nlp_member@example.org")]
    assert subjects == [f"[GPU Portal] Your request #{allocation.pk} (1 × a100 for nlp-llm) was approved"]
    expired = Delivery.objects.get(notification__event="allocation.expired")
    assert (expired.state, expired.last_error) == (DeliveryState.SKIPPED, "turned off by its recipient")


def test_a_daily_digest_gathers_a_persons_events_into_one_mail_at_the_digest_hour(
    mailed_world: World, smtp: Any, django_capture_on_commit_callbacks: Any,
) -> None:
    world = mailed_world
    member = world.users["nlp_member"]
    for event in ("allocation.decided", "allocation.expired", "allocation.started"):
        Preference.objects.create(user=member, event=event, mode=Mode.DIGEST)
    with django_capture_on_commit_callbacks(execute=True):
        first = _grant(world)
        second = _grant(world)
    with django_capture_on_commit_callbacks(execute=True):
        services.allocations_expire(now=first.ends_at + datetime.timedelta(seconds=1))
    assert smtp.to("nlp_member@example.org") == []  # nothing at once
    waiting = Delivery.objects.filter(user=member, mode=Mode.DIGEST, state=DeliveryState.PENDING)
    assert waiting.count() == 4  # two decisions, two expiries

    now = timezone.now()
    before_hour = now.replace(hour=6, minute=59)
    assert digests_send(now=before_hour, hour=7) == 0  # not yet
    later = now + datetime.timedelta(days=1)
    at_hour = later.replace(hour=7, minute=5)
    with django_capture_on_commit_callbacks(execute=True):
        assert digests_send(now=at_hour, hour=7) == 1
        assert digests_send(now=at_hour, hour=7) == 0  # the same day again: nothing left
    mails = smtp.to("nlp_member@example.org")
    assert len(mails) == 1
    assert mails[0]["Subject"].strip() == "[GPU Portal] Your GPU Portal digest: 4 notifications"
    text = mails[0].get_body(preferencelist=("plain",)).get_content()
    for allocation in (first, second):
        assert f"Your request #{allocation.pk} (1 × a100 for nlp-llm) was approved" in text
        assert f"Your grant #{allocation.pk} (1 × a100 for nlp-llm) expired" in text
    assert waiting.count() == 0
    assert set(Delivery.objects.filter(user=member, mode=Mode.DIGEST).values_list("state", flat=True)) == {"digested"}
    digest = Notification.objects.get(event="digest")
    assert Delivery.objects.filter(digest=digest).count() == 4


def test_the_unsubscribe_link_turns_that_event_off_in_one_click(
    mailed_world: World, smtp: Any, django_capture_on_commit_callbacks: Any,
) -> None:
    world = mailed_world
    with django_capture_on_commit_callbacks(execute=True):
        allocation = _grant(world)
    with django_capture_on_commit_callbacks(execute=True):
        services.allocations_expire(now=allocation.ends_at + datetime.timedelta(seconds=1))
    expired = [m for m in smtp.to("nlp_member@example.org") if "expired" in m["Subject"]][0]
    link = expired["List-Unsubscribe"].strip().strip("<>")
    assert link.startswith("https://gpu.example.org/notifications/unsubscribe/")
    assert expired["List-Unsubscribe-Post"].strip() == "List-Unsubscribe=One-Click"
    path = link.removeprefix("https://gpu.example.org")
    anonymous = Client(enforce_csrf_checks=True)
    assert anonymous.get(path).status_code == 200
    assert anonymous.post(path, {"List-Unsubscribe": "One-Click"}).status_code == 200
    assert Preference.objects.get(user=world.users["nlp_member"], event="allocation.expired").mode == Mode.OFF
    assert anonymous.post(path[:-3] + "xx/").status_code == 400  # a forged token changes nothing
    token = unsubscribe_token(user_id=world.users["nlp_member"].pk, event="allocation.decided")
    anonymous.post(f"/notifications/unsubscribe/{token}/")
    assert not Preference.objects.filter(event="allocation.decided").exists()  # approval events stay on


def test_the_portal_page_saves_preferences_with_htmx_and_shows_a_refusal(world: World) -> None:
    client = Client()
    client.force_login(world.users["nlp_admin"])
    page = client.get("/account/notifications/")
    assert page.status_code == 200
    assert b'name="allocation.expiring"' in page.content and b'href="/account/notifications/"' in page.content
    saved = client.post("/account/notifications/", {"allocation.expiring": "digest", "allocation.submitted": "immediate"},
                        headers={"HX-Request": "true"})  # fmt: skip
    assert saved.status_code == 200
    assert b"Your preferences were saved." in saved.content and b"<html" not in saved.content
    assert Preference.objects.get(user=world.users["nlp_admin"], event="allocation.expiring").mode == Mode.DIGEST
    refused = client.post("/account/notifications/", {"allocation.submitted": "off"}, headers={"HX-Request": "true"})
    assert refused.status_code == 400 and b"cannot be turned off" in refused.content
    assert Client().get("/account/notifications/").status_code == 302  # signed-in people only


def test_a_delivery_without_e_mail_configured_is_skipped_with_the_reason(
    mailed_world: World, django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        _grant(mailed_world)
    rows = set(Delivery.objects.values_list("state", "last_error"))
    assert rows == {(DeliveryState.SKIPPED, "e-mail is not configured (GPUPORTAL_EMAIL_URL)")}
    notifications_dispatch_task.apply()
    assert delivery_send(delivery_id=Delivery.objects.first().pk) is None  # type: ignore[union-attr]


def test_the_portal_page_lists_each_role_only_the_events_it_can_receive(world: World) -> None:
    def page(persona: str) -> str:
        client = Client()
        client.force_login(world.users[persona])
        return client.get("/account/notifications/").content.decode()

    researcher = page("nlp_member")
    assert 'name="allocation.decided"' in researcher and 'name="allocation.expiring"' in researcher
    for admins_only in ("allocation.submitted", "cluster.push_failed", "rule_change.proposed", "rule_change.emergency"):
        assert f'name="{admins_only}"' not in researcher, admins_only
    department_admin = page("nlp_admin")
    assert 'name="allocation.submitted"' in department_admin and 'name="cluster.push_failed"' not in department_admin
    platform_admin = page("platform")
    assert 'name="cluster.push_failed"' in platform_admin and 'name="rule_change.proposed"' in platform_admin


def test_saving_on_the_page_keeps_the_choices_of_events_not_listed(world: World) -> None:
    member = world.users["nlp_member"]
    Preference.objects.create(user=member, event="cluster.push_failed", mode=Mode.DIGEST)  # from a former role
    client = Client()
    client.force_login(member)
    client.post("/account/notifications/", {"allocation.expiring": "digest"}, headers={"HX-Request": "true"})
    assert Preference.objects.get(user=member, event="cluster.push_failed").mode == Mode.DIGEST
    assert Preference.objects.get(user=member, event="allocation.expiring").mode == Mode.DIGEST

"""Quota windows through ``/api/v1/quota-windows/`` and a quota's numbers over time through
``/api/v1/quotas/{id}/effective/`` and ``/timeline/``: a department admin asks, another (platform)
admin decides (four-eyes), a platform admin's own window is in force at once, every step audited;
bad terms are a 400 naming the field; nobody outside the quota's department sees its windows."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocations.models import Quota, QuotaWindow
from allocations.windows import services as window_services
from allocations.windows.terms import WindowTerms
from audit.models import AuditEvent
from clusters.models import ClusterPush
from kernel.errors import FieldError, NotAllowed, TransitionNotAllowed
from tenants.access import access_forget
from tenants.models import Membership, Role
from tests.conftest import World, requires_postgres
from tests.threads import all_at_once

POSTGRES: pytest.MarkDecorator = requires_postgres()
UTC = datetime.UTC
NOW_ISH = datetime.timedelta(minutes=1)


def total(world: World, department: Any = None) -> Quota:
    """A department's GPU-equivalent quota (nlp: guaranteed 0, limit 10)."""
    return Quota.objects.get(department=department or world.nlp, flavor__isnull=True)


def temporary(quota: Quota, **more: Any) -> dict[str, Any]:
    start = timezone.now() - NOW_ISH
    return {"quota": quota.pk, "kind": "temporary", "begins_at": start.isoformat(),
            "ends_at": (start + datetime.timedelta(days=1)).isoformat(), "limit_delta": "4", **more}


def nightly(quota: Quota, **more: Any) -> dict[str, Any]:
    return {"quota": quota.pk, "kind": "recurring", "begins_at": timezone.now().isoformat(),
            "rrule": "FREQ=DAILY;BYHOUR=20;BYMINUTE=0", "timezone": "Asia/Shanghai", "duration": "PT12H",
            "limit": "6", **more}


def post(world: World, persona: str, path: str, body: dict[str, Any] | None = None) -> Any:
    return world.client(persona).post(f"/api/v1/{path}", body or {}, format="json")


def ask(world: World, body: dict[str, Any], persona: str = "nlp_admin") -> dict[str, Any]:
    response = post(world, persona, "quota-windows/", body)
    assert response.status_code == 201, response.content
    created: dict[str, Any] = response.json()
    return created


def refused(response: Any, field: str, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.content
    error: dict[str, Any] = response.json()["error"]
    assert list(error["fields"]) == [field], error
    return error


def effective(world: World, quota: Quota, persona: str = "nlp_member", **params: str) -> dict[str, Any]:
    response = world.client(persona).get(f"/api/v1/quotas/{quota.pk}/effective/", params)
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    return body


def events(window_id: int) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(target_type="allocations.quotawindow", target_id=str(window_id)).order_by("seq"))


def cluster_pushes() -> int:
    return ClusterPush.objects.filter(project__isnull=True).count()


# ------------------------------------------------------------------------------ happy paths


@pytest.mark.django_db
def test_a_department_admin_asks_and_the_window_waits_for_a_platform_admin(world: World) -> None:
    window = ask(world, temporary(total(world)))

    assert (window["state"], window["requested_by"], window["decided_by"]) == ("pending", "nlp_admin", None)
    assert (window["department"], window["limit_delta"], window["in_force_now"]) == ("nlp", "4.0000", False)
    assert [edge["kind"] for edge in window["next_edges"]] == ["end"]  # it began a minute ago, if approved
    assert effective(world, total(world))["limit"] == "10.0000"
    [event] = events(window["id"])
    assert (event.action, event.department_id, event.actor_username) == ("quota_window.requested", world.nlp.pk, "nlp_admin")
    assert event.after["limit_delta"] == "4" and event.after["state"] == "pending"


@pytest.mark.django_db
def test_a_platform_admin_approves_it_and_the_limit_rises_now_with_a_push(world: World) -> None:
    window = ask(world, temporary(total(world)))
    pushes = cluster_pushes()

    response = post(world, "platform", f"quota-windows/{window['id']}/approve/", {"comment": "festival"})

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["state"], body["decided_by"], body["decision_comment"], body["in_force_now"]) == (
        "approved", "platform", "festival", True)
    now = effective(world, total(world))
    assert (now["guaranteed"], now["limit"], now["limit_by"], now["guaranteed_by"]) == ("0.0000", "14.0000", window["id"], None)
    assert (now["base"], now["windows"]) == ({"guaranteed": "0.0000", "limit": "10.0000"}, [window["id"]])
    assert cluster_pushes() == pushes + 1
    event = events(window["id"])[-1]
    assert (event.action, event.actor_username, event.department_id) == ("quota_window.approved", "platform", world.nlp.pk)
    assert event.details["direct"] is False and event.details["in_force"] is True and event.details["pushes"] == 1


@pytest.mark.django_db
def test_a_platform_admins_own_window_is_in_force_at_once_with_four_eyes_off(world: World, settings: Any) -> None:
    settings.GPUPORTAL_FOUR_EYES = False  # with it on, another platform admin approves (test_rule_four_eyes.py)
    pushes = cluster_pushes()

    window = ask(world, temporary(total(world), limit_delta=None, limit="12", guaranteed_delta="3"), persona="platform")

    assert (window["state"], window["decided_by"], window["in_force_now"]) == ("approved", "platform", True)
    now = effective(world, total(world))
    assert (now["guaranteed"], now["limit"]) == ("3.0000", "12.0000")
    assert cluster_pushes() == pushes + 1
    [event] = events(window["id"])
    assert event.action == "quota_window.approved" and event.details["direct"] is True


@pytest.mark.django_db
def test_a_window_that_begins_later_is_approved_without_a_push(world: World) -> None:
    start = timezone.now() + datetime.timedelta(days=2)
    body = temporary(total(world), begins_at=start.isoformat(), ends_at=(start + datetime.timedelta(hours=6)).isoformat())
    pushes = cluster_pushes()

    window = ask(world, body, persona="platform")

    assert window["in_force_now"] is False and cluster_pushes() == pushes
    assert [datetime.datetime.fromisoformat(edge["at"]) for edge in window["next_edges"]] == [
        datetime.datetime.fromisoformat(body["begins_at"]), datetime.datetime.fromisoformat(body["ends_at"])]


@pytest.mark.django_db
def test_a_recurring_window_takes_an_iso_duration_and_lists_its_next_edges(world: World) -> None:
    window = ask(world, nightly(total(world), priority_class=world.preemptible.pk))

    assert (window["duration"], window["duration_minutes"], window["rrule"]) == ("PT12H", 720, "FREQ=DAILY;BYHOUR=20;BYMINUTE=0")
    assert window["priority_class"] == world.preemptible.pk
    edges = [(datetime.datetime.fromisoformat(edge["at"]), edge["kind"]) for edge in window["next_edges"]]
    assert len(edges) == 3
    for at, kind in edges:  # 20:00 and 08:00 in Shanghai (UTC+8, no DST): 12:00 and 00:00 UTC
        assert (at.astimezone(UTC).hour, at.minute) == ((12, 0) if kind == "begin" else (0, 0))
    assert [edges[1][0] - edges[0][0], edges[2][0] - edges[1][0]] in (
        [datetime.timedelta(hours=12), datetime.timedelta(hours=12)],)


@pytest.mark.django_db
def test_the_requester_cancels_a_pending_window(world: World) -> None:
    window = ask(world, temporary(total(world)))

    response = post(world, "nlp_admin", f"quota-windows/{window['id']}/cancel/")

    assert response.status_code == 200, response.content
    assert (response.json()["state"], response.json()["decided_by"], response.json()["next_edges"]) == (
        "cancelled", "nlp_admin", [])
    event = events(window["id"])[-1]
    assert (event.action, event.details["was"], event.details["in_force"]) == ("quota_window.cancelled", "pending", False)


@pytest.mark.django_db
def test_a_window_cancelled_in_force_ends_now_and_says_so(world: World, settings: Any) -> None:
    settings.GPUPORTAL_FOUR_EYES = False  # the platform admin's window is in force at once
    window = ask(world, temporary(total(world)), persona="platform")
    pushes = cluster_pushes()

    response = post(world, "platform", f"quota-windows/{window['id']}/cancel/")

    assert response.status_code == 200, response.content
    assert effective(world, total(world))["limit"] == "10.0000"
    assert cluster_pushes() == pushes + 1
    event = events(window["id"])[-1]
    assert event.details["was"] == "approved" and event.details["in_force"] is True and "ends_now" in event.details


@pytest.mark.django_db
def test_a_rejection_needs_a_comment(world: World) -> None:
    window = ask(world, temporary(total(world)))

    refused(post(world, "platform", f"quota-windows/{window['id']}/reject/", {"comment": " "}), "comment")
    response = post(world, "platform", f"quota-windows/{window['id']}/reject/", {"comment": "not this week"})

    assert response.status_code == 200 and response.json()["state"] == "rejected"
    assert events(window["id"])[-1].action == "quota_window.rejected"
    assert effective(world, total(world))["windows"] == []


# ------------------------------------------------------------------------------- four eyes


@pytest.mark.django_db
def test_only_a_platform_admin_decides_and_never_on_a_window_they_asked_for(world: World, settings: Any) -> None:
    window = ask(world, temporary(total(world)))
    assert post(world, "nlp_admin", f"quota-windows/{window['id']}/approve/").status_code == 403
    requester = world.users["nlp_admin"]
    Membership.objects.create(user=requester, department=world.acme, role=Role.PLATFORM_ADMIN)  # promoted since
    access_forget(requester)

    response = post(world, "nlp_admin", f"quota-windows/{window['id']}/approve/")

    assert response.status_code == 403 and response.json()["error"]["code"] == "four_eyes"
    assert post(world, "nlp_admin", f"quota-windows/{window['id']}/reject/", {"comment": "no"}).json()["error"]["code"] == "four_eyes"
    settings.GPUPORTAL_FOUR_EYES = False
    assert post(world, "nlp_admin", f"quota-windows/{window['id']}/approve/").status_code == 200


@pytest.mark.parametrize("action", ["approve", "reject", "cancel"])
@pytest.mark.django_db
def test_a_decided_window_cannot_be_decided_again(world: World, action: str) -> None:
    window = ask(world, temporary(total(world)))
    assert post(world, "platform", f"quota-windows/{window['id']}/reject/", {"comment": "no"}).status_code == 200

    body = {"comment": "again"} if action != "cancel" else None  # cancel takes no body: a comment would be refused
    response = post(world, "platform", f"quota-windows/{window['id']}/{action}/", body)

    assert response.status_code == 409 and response.json()["error"]["details"] == {"state": "rejected"}


@pytest.mark.django_db
def test_a_window_that_ended_while_pending_cannot_be_approved(world: World) -> None:
    window = ask(world, temporary(total(world)))
    QuotaWindow.objects.filter(pk=window["id"]).update(ends_at=timezone.now() - NOW_ISH)

    response = post(world, "platform", f"quota-windows/{window['id']}/approve/")

    assert response.status_code == 409 and "ends_at" in response.json()["error"]["details"]


# ---------------------------------------------------------------------------- bad terms


def far(days: int) -> str:
    return (timezone.now() + datetime.timedelta(days=days)).isoformat()


BAD_TEMPORARY: list[tuple[dict[str, Any], str]] = [
    ({"kind": "weekly"}, "kind"),
    ({"ends_at": None}, "ends_at"),
    ({"ends_at": far(-3)}, "ends_at"),  # before begins_at
    ({"begins_at": far(-3), "ends_at": far(-2)}, "ends_at"),  # over already
    ({"begins_at": far(-400)}, "begins_at"),
    ({"begins_at": far(3000), "ends_at": far(3001)}, "begins_at"),
    ({"rrule": "FREQ=DAILY"}, "rrule"),
    ({"timezone": "Europe/Paris"}, "timezone"),
    ({"duration": "PT1H"}, "duration"),
    ({"limit_delta": None}, "limit_delta"),  # no value at all
    ({"limit": "12"}, "limit"),  # and limit_delta: both
    ({"limit_delta": None, "limit": "-1"}, "limit"),
    ({"limit_delta": "99999999999"}, "limit_delta"),
    ({"limit_delta": "NaN"}, "limit_delta"),
    ({"priority_class": 987654}, "priority_class"),
    ({"shrink_policy": "sometimes"}, "shrink_policy"),
    ({"justification": "x" * 2001}, "justification"),
]
BAD_RECURRING: list[tuple[dict[str, Any], str]] = [
    ({"rrule": ""}, "rrule"),
    ({"rrule": "FREQ=SOMETIMES"}, "rrule"),
    ({"rrule": "FREQ=MINUTELY"}, "rrule"),
    ({"rrule": "FREQ=DAILY;BYDAY=XX"}, "rrule"),
    ({"rrule": "FREQ=DAILY;INTERVAL=0"}, "rrule"),
    ({"rrule": "FREQ=DAILY;BYHOUR=25"}, "rrule"),
    ({"rrule": "FREQ=DAILY;COUNT=0"}, "rrule"),
    ({"rrule": "FREQ=DAILY;UNTIL=20200101T000000"}, "rrule"),
    ({"rrule": "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30"}, "rrule"),  # never: refused at once, not after a search to 9999
    ({"rrule": "DTSTART:20270101T000000\nRRULE:FREQ=DAILY"}, "rrule"),
    ({"timezone": ""}, "timezone"),
    ({"timezone": "Mars/Olympus_Mons"}, "timezone"),
    ({"timezone": "../../etc/passwd"}, "timezone"),
    ({"duration": None}, "duration"),
    ({"duration": "P400D"}, "duration"),
    ({"duration": "12 hours"}, "duration"),
    ({"duration": "PT0M"}, "duration"),
    ({"ends_at": far(-1)}, "ends_at"),
]


@pytest.mark.parametrize(("change", "field"), BAD_TEMPORARY, ids=lambda value: str(value)[:40])
@pytest.mark.django_db
def test_bad_terms_of_a_temporary_window_are_a_400_naming_the_field(world: World, change: dict[str, Any], field: str) -> None:
    body = {key: value for key, value in temporary(total(world), **change).items() if value is not None or key in change}
    response = post(world, "platform", "quota-windows/", body)
    refused(response, field)
    assert not QuotaWindow.objects.exists()


@pytest.mark.parametrize(("change", "field"), BAD_RECURRING, ids=lambda value: str(value)[:40])
@pytest.mark.django_db
def test_bad_terms_of_a_recurring_window_are_a_400_naming_the_field(world: World, change: dict[str, Any], field: str) -> None:
    refused(post(world, "nlp_admin", "quota-windows/", nightly(total(world), **change)), field)
    assert not QuotaWindow.objects.exists()


@pytest.mark.django_db
def test_a_flavor_quota_changes_by_whole_units(world: World) -> None:
    a100 = Quota.objects.get(department=world.nlp, flavor=world.a100)
    refused(post(world, "nlp_admin", "quota-windows/", temporary(a100, limit_delta="0.5")), "limit_delta")
    assert ask(world, temporary(a100, limit_delta="-2"))["limit_delta"] == "-2.0000"


@pytest.mark.django_db
def test_the_service_refuses_what_the_api_would(world: World) -> None:
    """The portal calls the services directly: they hold the rules, with the same field names."""
    now = timezone.now()
    with pytest.raises(FieldError) as caught:
        window_services.quota_window_create(
            actor=world.users["nlp_admin"], quota_id=total(world).pk,
            terms=WindowTerms(kind="recurring", begins_at=now, rrule="FREQ=DAILY", timezone="UTC", duration_minutes=0,
                              limit_delta=Decimal(1)),
        )
    assert list(caught.value.fields) == ["duration"]
    with pytest.raises(NotAllowed):
        window_services.quota_window_create(
            actor=world.users["nlp_member"], quota_id=total(world).pk,
            terms=WindowTerms(kind="temporary", begins_at=now, ends_at=now + datetime.timedelta(hours=1),
                              limit_delta=Decimal(1)),
        )


# --------------------------------------------------------------------------- within reach


@pytest.mark.django_db
def test_outsiders_and_other_departments_get_404_and_lists_hold_only_what_is_within_reach(world: World) -> None:
    nlp = ask(world, temporary(total(world)))
    vision = ask(world, temporary(total(world, world.vision)), persona="vision_admin")
    refused(post(world, "vision_admin", "quota-windows/", temporary(total(world))), "quota")

    for persona in ("vision_admin", "vision_member", "speech_member", "nobody"):
        assert world.client(persona).get(f"/api/v1/quota-windows/{nlp['id']}/").status_code == 404, persona
        for action in ("approve", "reject", "cancel"):
            body = {"comment": "x"} if action != "cancel" else None  # cancel takes no body
            assert post(world, persona, f"quota-windows/{nlp['id']}/{action}/", body).status_code == 404
        assert world.client(persona).get(f"/api/v1/quotas/{total(world).pk}/effective/").status_code == 404
        assert world.client(persona).get(f"/api/v1/quotas/{total(world).pk}/timeline/").status_code == 404

    def listed(persona: str, **params: Any) -> list[int]:
        return [row["id"] for row in world.client(persona).get("/api/v1/quota-windows/", params).json()["results"]]

    assert listed("nlp_member") == [nlp["id"]]
    assert listed("nobody") == []
    assert listed("auditor") == [vision["id"], nlp["id"]]
    assert listed("platform", department=world.vision.pk) == [vision["id"]]
    assert listed("platform", quota=total(world).pk) == [nlp["id"]]
    assert listed("platform", state="approved") == []
    assert listed("vision_member", department=world.nlp.pk) == []
    refused(world.client("platform").get("/api/v1/quota-windows/", {"state": "maybe"}), "state")


@pytest.mark.django_db
def test_the_list_reads_as_many_queries_for_many_windows_as_for_few(world: World) -> None:
    def count() -> int:
        client = world.client("platform")
        client.get("/api/v1/quota-windows/")  # warm the access cache
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/api/v1/quota-windows/", {"page_size": 100}).status_code == 200
        return len(queries.captured_queries)

    ask(world, temporary(total(world)))
    ask(world, nightly(total(world, world.vision)), persona="vision_admin")
    few = count()
    for _ in range(3):
        ask(world, temporary(total(world)))
        ask(world, nightly(total(world, world.vision)), persona="platform")
    assert count() == few


@pytest.mark.django_db
def test_the_django_admin_shows_windows_and_changes_none(world: World) -> None:
    window = ask(world, temporary(total(world)))
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.org", "pw-ops"))

    assert client.get("/admin/allocations/quotawindow/").status_code == 200
    assert client.get(f"/admin/allocations/quotawindow/{window['id']}/change/").status_code == 200
    assert client.post(f"/admin/allocations/quotawindow/{window['id']}/change/", {"state": "approved"}).status_code == 403
    assert client.get("/admin/allocations/quotawindowedge/").status_code == 200
    assert QuotaWindow.objects.get(pk=window["id"]).state == "pending"


# ------------------------------------------------------------------ racing decisions (PostgreSQL)


@POSTGRES
@pytest.mark.django_db(transaction=True)
def test_racing_decisions_on_one_window_leave_exactly_one(world: World) -> None:
    """Two approvals and a rejection at once: the window's row lock lets one through; the others
    then see it decided (409), and the log holds one decision. (A withdrawal is not raced here: it
    may legitimately follow an approval, since an approved window can be cancelled.)"""
    other = world.persona_add("platform2", role=Role.PLATFORM_ADMIN, department=world.acme)
    start = timezone.now() + datetime.timedelta(hours=1)
    window = window_services.quota_window_create(
        actor=world.users["nlp_admin"], quota_id=total(world).pk,
        terms=WindowTerms(kind="temporary", begins_at=start, ends_at=start + datetime.timedelta(hours=2),
                          limit_delta=Decimal(1)),
    )

    def job(call: Callable[[], QuotaWindow]) -> Callable[[], str]:
        def run() -> str:
            try:
                return call().state
            except TransitionNotAllowed:
                return "409"

        return run

    outcomes = all_at_once([
        job(lambda: window_services.quota_window_approve(actor=world.users["platform"], window_id=window.pk)),
        job(lambda: window_services.quota_window_reject(actor=other, window_id=window.pk, comment="no")),
        job(lambda: window_services.quota_window_approve(actor=other, window_id=window.pk)),
    ])

    assert outcomes["409"] == 2 and sum(outcomes.values()) == 3, outcomes
    [decided] = [state for state in outcomes if state != "409"]
    window.refresh_from_db()
    assert window.state == decided
    assert [event.action for event in events(window.pk)][1:] == [f"quota_window.{decided}"]

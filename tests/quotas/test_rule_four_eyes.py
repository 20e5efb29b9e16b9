"""Four-eyes on the rules (``GPUPORTAL_FOUR_EYES``, on by default): a change of a quota, a quota
window or a priority class by anyone, platform admins included, waits until a second platform
admin approves it over HTTP; its proposer never decides it; an emergency with a stated reason
applies at once, audited as such and told to the other platform admins; without a reason it is a
400 naming ``reason``. With four-eyes off, every change applies at once as before."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from allocations.models import PriorityClass, Quota, RuleChange, RuleChangeState
from allocations.models.windows import QuotaWindow, WindowState
from audit.models import AuditEvent
from notifications.models import Notification
from tenants.models import Role
from tests.conftest import World

pytestmark = pytest.mark.django_db


@pytest.fixture
def second(world: World) -> User:
    """A second platform admin, who may approve what ``platform`` proposes."""
    return world.persona_add("platform_second", role=Role.PLATFORM_ADMIN, department=world.acme)


def total(world: World) -> Quota:
    """nlp's GPU-equivalent quota (limit 10 in the world)."""
    return Quota.objects.get(department=world.nlp, flavor__isnull=True)


def patch(world: World, persona: str, quota: Quota, body: dict[str, Any]) -> Any:
    return world.client(persona).patch(f"/api/v1/quotas/{quota.pk}/", body, format="json")


def get(world: World, persona: str, quota: Quota) -> dict[str, Any]:
    response = world.client(persona).get(f"/api/v1/quotas/{quota.pk}/")
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    return body


def decide(world: World, persona: str, change_id: int, action: str, comment: str = "") -> Any:
    return world.client(persona).post(f"/api/v1/rule-changes/{change_id}/{action}/", {"comment": comment}, format="json")


def actions_of(target: Any) -> list[str]:
    return list(AuditEvent.objects.filter(target_type=target._meta.label_lower, target_id=str(target.pk))
                .order_by("pk").values_list("action", flat=True))


def test_a_platform_admins_quota_change_waits_for_a_second_admin(world: World, second: User) -> None:
    quota = total(world)
    old = get(world, "platform", quota)["limit"]

    response = patch(world, "platform", quota, {"limit": "14", "reason": "more room for the summer school"})

    assert response.status_code == 202, response.content
    pending = response.json()
    assert (pending["kind"], pending["state"], pending["proposed_by"]) == ("quota.update", "pending", "platform")
    assert pending["proposed"] == {"limit": "14"} and pending["before"]["limit"] == "10"
    shown = get(world, "nlp_admin", quota)
    assert shown["limit"] == old == "10.0000" and shown["pending_changes"] == [pending["id"]]
    notice = Notification.objects.get(event="rule_change.proposed")
    assert second.pk in notice.recipients and world.users["platform"].pk not in notice.recipients

    own = decide(world, "platform", pending["id"], "approve")
    assert own.status_code == 403 and own.json()["error"]["code"] == "four_eyes"
    assert get(world, "platform", quota)["limit"] == "10.0000"

    approved = decide(world, "platform_second", pending["id"], "approve", "agreed")

    assert approved.status_code == 200, approved.content
    assert (approved.json()["state"], approved.json()["decided_by"]) == ("applied", "platform_second")
    after = get(world, "platform", quota)
    assert after["limit"] == "14.0000" and after["pending_changes"] == []
    change = RuleChange.objects.get(pk=pending["id"])
    assert actions_of(change) == ["rule_change.proposed", "rule_change.approved"]
    quota_set = AuditEvent.objects.filter(action="quota.set").latest("pk")
    assert quota_set.actor_id == second.pk and quota_set.details["via"] == f"rule_change:{change.pk}"
    again = decide(world, "platform_second", pending["id"], "approve")
    assert again.status_code == 409


def test_a_proposal_is_checked_at_once_and_a_rejection_needs_a_comment(world: World, second: User) -> None:
    quota = total(world)

    refused = patch(world, "platform", quota, {"guaranteed": "12"})  # above the limit 10
    assert refused.status_code == 400 and "guaranteed" in refused.json()["error"]["fields"]
    assert not RuleChange.objects.exists()

    pending = patch(world, "platform", quota, {"limit": "4"}).json()
    assert decide(world, "platform_second", pending["id"], "reject").status_code == 400
    rejected = decide(world, "platform_second", pending["id"], "reject", "too low for the running grants")
    assert rejected.status_code == 200 and rejected.json()["state"] == "rejected"
    assert get(world, "platform", quota)["limit"] == "10.0000"
    assert actions_of(RuleChange.objects.get()) == ["rule_change.proposed", "rule_change.rejected"]


def test_only_the_proposer_withdraws_and_nobody_else_decides(world: World, second: User) -> None:
    pending = patch(world, "platform", total(world), {"limit": "12"}).json()

    assert decide(world, "nlp_admin", pending["id"], "approve").status_code == 403
    assert world.client("vision_admin").get(f"/api/v1/rule-changes/{pending['id']}/").status_code == 404
    assert world.client("platform_second").post(f"/api/v1/rule-changes/{pending['id']}/withdraw/").status_code == 403
    withdrawn = world.client("platform").post(f"/api/v1/rule-changes/{pending['id']}/withdraw/")

    assert withdrawn.status_code == 200 and withdrawn.json()["state"] == "withdrawn"


def test_an_emergency_with_its_reason_applies_at_once_audited_and_told(world: World, second: User) -> None:
    quota = total(world)

    response = patch(world, "platform", quota, {"limit": "16", "emergency": True, "reason": "cluster B is down"})

    assert response.status_code == 200, response.content
    assert response.json()["limit"] == "16.0000"
    change = RuleChange.objects.get()
    assert (change.state, change.emergency, change.reason) == (RuleChangeState.APPLIED, True, "cluster B is down")
    event = AuditEvent.objects.get(action="rule_change.emergency")
    assert event.actor_id == world.users["platform"].pk and event.details["reason"] == "cluster B is down"
    notice = Notification.objects.get(event="rule_change.emergency")
    assert notice.recipients == [second.pk] and notice.payload["reason"] == "cluster B is down"


@pytest.mark.parametrize("reason", [None, "", "   ", "x" * 501])
def test_an_emergency_without_a_reason_is_a_400_naming_reason(world: World, reason: str | None) -> None:
    body: dict[str, Any] = {"limit": "16", "emergency": True}
    if reason is not None:
        body["reason"] = reason

    response = patch(world, "platform", total(world), body)

    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["fields"]) == ["reason"]
    assert total(world).limit == Decimal(10) and not RuleChange.objects.exists()


def window_body(world: World, **extra: Any) -> dict[str, Any]:
    begins = timezone.now() - datetime.timedelta(minutes=1)
    return {"quota": total(world).pk, "kind": "temporary", "begins_at": begins.isoformat(),
            "ends_at": (begins + datetime.timedelta(days=1)).isoformat(), "limit_delta": "4", **extra}


def test_a_platform_admins_window_is_pending_not_direct(world: World, second: User) -> None:
    response = world.client("platform").post("/api/v1/quota-windows/", window_body(world), format="json")

    assert response.status_code == 201, response.content
    window = response.json()
    assert (window["state"], window["decided_by"], window["in_force_now"]) == ("pending", None, False)
    assert second.pk in Notification.objects.get(event="rule_change.proposed").recipients
    own = world.client("platform").post(f"/api/v1/quota-windows/{window['id']}/approve/", {}, format="json")
    assert own.status_code == 403 and own.json()["error"]["code"] == "four_eyes"

    approved = world.client("platform_second").post(f"/api/v1/quota-windows/{window['id']}/approve/", {}, format="json")

    assert approved.status_code == 200 and approved.json()["in_force_now"] is True


def test_an_emergency_window_is_in_force_at_once_and_audited(world: World, second: User) -> None:
    body = window_body(world, emergency=True, reason="a deadline tonight")

    response = world.client("platform").post("/api/v1/quota-windows/", body, format="json")

    assert response.status_code == 201 and response.json()["state"] == "approved"
    window = QuotaWindow.objects.get()
    assert actions_of(window) == ["quota_window.approved", "rule_change.emergency"]
    assert AuditEvent.objects.get(action="rule_change.emergency").details["reason"] == "a deadline tonight"
    missing = world.client("platform").post("/api/v1/quota-windows/", window_body(world, emergency=True), format="json")
    assert missing.status_code == 400 and list(missing.json()["error"]["fields"]) == ["reason"]


def test_a_priority_class_change_waits_too(world: World, second: User) -> None:
    url = f"/api/v1/priority-classes/{world.standard.pk}/"

    response = world.client("platform").patch(url, {"notice_minutes": 45}, format="json")

    assert response.status_code == 202 and response.json()["kind"] == "priority_class.update", response.content
    assert PriorityClass.objects.get(pk=world.standard.pk).notice_minutes != 45
    assert decide(world, "platform_second", response.json()["id"], "approve").status_code == 200
    assert PriorityClass.objects.get(pk=world.standard.pk).notice_minutes == 45
    created = world.client("platform").post("/api/v1/priority-classes/", {"name": "gpu-urgent", "value": 5000},
                                            format="json")
    assert created.status_code == 202 and not PriorityClass.objects.filter(name="gpu-urgent").exists()


def test_with_four_eyes_off_every_change_applies_at_once(world: World, settings: Any) -> None:
    settings.GPUPORTAL_FOUR_EYES = False

    response = patch(world, "platform", total(world), {"limit": "14"})
    window = world.client("platform").post("/api/v1/quota-windows/", window_body(world), format="json")

    assert response.status_code == 200 and response.json()["limit"] == "14.0000"
    assert window.status_code == 201 and window.json()["state"] == WindowState.APPROVED
    assert not RuleChange.objects.exists()


def portal(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_approvals_page_lets_a_second_admin_decide(world: World, second: User) -> None:
    pending = patch(world, "platform", total(world), {"limit": "13"}).json()

    own = portal(world.users["platform"]).get("/approvals/").content.decode()
    assert f"pending-rule-change-{pending['id']}" in own and "Your own change" in own
    page = portal(second)
    assert f"Approve change #{pending['id']}" in page.get("/approvals/").content.decode()
    page.post(f"/rule-changes/{pending['id']}/decide/", {"decision": "approve", "comment": ""})

    assert total(world).limit == Decimal(13)

"""The idle-grant inbox: who sees which case, keep and release in one click for the grant's project,
exempt for its department's admins, errors next to the fields, and outsiders kept out."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from accounting.idle_models import IdleCase, IdlePolicy, IdleState
from allocations.models import Allocation, AllocationState
from tests.conftest import World
from tests.frontend.conftest import Login
from tests.telemetry.usage_history import grant

pytestmark = pytest.mark.django_db


def warned_case(world: World, *, project: str = "llm", max_keeps: int = 2) -> IdleCase:
    held = grant(world, since=timezone.now() - datetime.timedelta(hours=5), project=project)
    Allocation.objects.filter(pk=held.pk).update(state=AllocationState.ACTIVE)
    policy, _ = IdlePolicy.objects.get_or_create(name="portal", defaults={"action": "reclaim", "max_keeps": max_keeps})
    now = timezone.now()
    return IdleCase.objects.create(
        allocation=held, policy=policy, state=IdleState.WARNED, opened_at=now, idle_since=now - datetime.timedelta(hours=2),
        idle_minutes=120, last_evaluated_at=now, warned_at=now, action_due_at=now + datetime.timedelta(hours=1),
        evidence={"run_mean_activity": 0.01, "unknown_buckets": 3},
    )


def test_the_owner_sees_the_case_and_keeps_it_with_a_reason(world: World, login: Login) -> None:
    case = warned_case(world)
    client = login("nlp_member")
    html = client.get("/idle/").content.decode()
    assert f'id="case-{case.pk}"' in html and "Keep it" in html and f"Release #{case.allocation_id} now" in html
    assert "Exempt" not in html.split('id="closed-title"')[0]  # researchers do not exempt
    assert "3 unknown readings skipped" in html

    refused = client.post(f"/idle/{case.pk}/keep/", {"reason": ""})
    assert refused.status_code == 400 and 'aria-invalid="true"' in refused.content.decode()
    kept = client.post(f"/idle/{case.pk}/keep/", {"reason": "tokenising the corpus"})
    assert kept.status_code == 302
    case.refresh_from_db()
    assert case.state == IdleState.KEPT and case.reason == "tokenising the corpus"
    closed = client.get("/idle/").content.decode()
    assert "tokenising the corpus" in closed and 'id="no-open-cases"' in closed


def test_release_gives_the_grant_back_in_one_click(world: World, login: Login) -> None:
    case = warned_case(world)
    response = login("nlp_admin").post(f"/idle/{case.pk}/release/", {})
    assert response.status_code == 302
    case.refresh_from_db()
    assert case.state == IdleState.RELEASED
    assert Allocation.objects.get(pk=case.allocation_id).state == AllocationState.RELEASED


def test_department_admins_exempt_until_a_date_and_bad_dates_are_named(world: World, login: Login) -> None:
    case = warned_case(world)
    client = login("nlp_admin")
    assert "Exempt until (UTC)" in client.get("/idle/").content.decode()
    past = client.post(f"/idle/{case.pk}/exempt/", {"until": "2020-01-01T00:00", "reason": "serving"})
    assert past.status_code == 400 and "until:" in past.content.decode()
    until = (timezone.now() + datetime.timedelta(days=3)).strftime("%Y-%m-%dT%H:%M")
    assert client.post(f"/idle/{case.pk}/exempt/", {"until": until, "reason": "serving the demo"}).status_code == 302
    case.refresh_from_db()
    assert case.state == IdleState.EXEMPTED and case.decided_by == world.users["nlp_admin"]


def test_keeps_run_out_and_the_page_says_so(world: World, login: Login) -> None:
    case = warned_case(world, max_keeps=0)
    client = login("nlp_member")
    assert "No keeps left this week" in client.get("/idle/").content.decode()
    refused = client.post(f"/idle/{case.pk}/keep/", {"reason": "please"})
    assert refused.status_code == 400 and "allows no keeps" in refused.content.decode()


def test_others_see_nothing_or_cannot_act(world: World, login: Login) -> None:
    case = warned_case(world)
    assert f'id="case-{case.pk}"' not in login("vision_member").get("/idle/").content.decode()
    assert login("vision_member").post(f"/idle/{case.pk}/keep/", {"reason": "x"}).status_code == 404
    auditor = login("auditor").get("/idle/").content.decode()
    assert f'id="case-{case.pk}"' in auditor and "Keep it" not in auditor
    assert login("auditor").post(f"/idle/{case.pk}/keep/", {"reason": "x"}).status_code == 403
    assert login("nobody").get("/idle/").status_code == 403
    assert login(None).get("/idle/").status_code == 302  # to the sign-in page
    case.refresh_from_db()
    assert case.state == IdleState.WARNED

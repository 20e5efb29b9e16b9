"""Idle grants in a real browser, under the deployed Content-Security-Policy: the evaluation warns
a grant that sat idle, its owner sees the notice on the dashboard, keeps one grant with a reason
and releases another once the page has asked, and the department admin sees them closed."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from accounting.idle.evaluation import idle_cases_evaluate
from accounting.idle_models import IdleCase, IdlePolicy, IdleState
from allocations.grants import idle_ladder as ladder
from allocations.models import Allocation, AllocationState
from tests.browser.conftest import Portal
from tests.telemetry.usage_history import HOUR, fill, grant

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_owner_keeps_one_idle_grant_and_releases_another(portal: Portal) -> None:
    page, world = portal.page, portal.world
    IdlePolicy.objects.create(name="browser", action="reclaim", window_minutes=60, grace_minutes=30)
    end = ladder.last_complete_bucket(timezone.now()) + ladder.BUCKET  # the newest complete bucket's end
    kept, released = (grant(world, since=end - 6 * HOUR) for _ in range(2))
    for held in (kept, released):
        Allocation.objects.filter(pk=held.pk).update(state=AllocationState.ACTIVE)
        fill(held, start=end - 6 * HOUR, end=end - 2 * HOUR, activity=0.6)
        fill(held, start=end - 2 * HOUR, end=end, activity=0.01)
    idle_cases_evaluate()
    assert set(IdleCase.objects.values_list("state", flat=True)) == {IdleState.WARNED}

    portal.login("nlp_member")
    expect(page.locator("#idle-notice")).to_contain_text("2 of your grants are idle")
    portal.nav("Idle grants")
    expect(page.get_by_role("heading", name="Idle grants", level=1)).to_be_visible()
    portal.shot("idle-warned")
    case = page.locator(f"#case-{IdleCase.objects.get(allocation=kept).pk}")
    case.get_by_label("Why keep it").fill("tokenising the corpus before the next run")
    case.get_by_role("button", name="Keep it").click()
    expect(page.locator(".messages").first).to_contain_text(f"Allocation #{kept.pk} is kept")
    page.locator(f"#case-{IdleCase.objects.get(allocation=released).pk}").get_by_role(
        "button", name=re.compile(f"Release #{released.pk} now")
    ).click()
    dialog = page.get_by_role("alertdialog")  # a release cannot be undone: the page asks first
    expect(dialog).to_contain_text(f"Release #{released.pk} now?")
    assert Allocation.objects.get(pk=released.pk).state != AllocationState.RELEASED
    dialog.get_by_role("button", name=f"Release #{released.pk}", exact=True).click()
    expect(page.locator("#no-open-cases")).to_be_visible()
    expect(page.locator("#closed-cases")).to_contain_text("tokenising the corpus")
    portal.shot("idle-closed")
    assert Allocation.objects.get(pk=released.pk).state == AllocationState.RELEASED
    assert IdleCase.objects.get(allocation=kept).state == IdleState.KEPT
    assert not [error for error in portal.console_errors if "Content Security Policy" in error]

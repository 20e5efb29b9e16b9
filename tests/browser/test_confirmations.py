"""Destructive actions ask before they act, and a decision that takes a while says it is under way:
the approvals queue in a real browser, under the deployed security headers."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from allocations.grants import services
from allocations.models import Allocation, AllocationState
from tests.browser.conftest import Portal

pytestmark = pytest.mark.django_db(transaction=True)


def _pending(portal: Portal) -> Allocation:
    world, start = portal.world, timezone.now()
    return services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=1,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=2),
        justification="browser tests",
    )


def test_reject_asks_first_and_cancel_leaves_the_request_pending(portal: Portal) -> None:
    page = portal.page
    allocation = _pending(portal)
    portal.login("nlp_admin")
    portal.nav("Approvals")
    page.get_by_label(f"Select request #{allocation.pk}").check()
    page.get_by_label("Comment").fill("No budget this month")
    reject = page.get_by_role("button", name="Reject selected")
    reject.click()
    dialog = page.get_by_role("alertdialog")
    expect(dialog).to_contain_text("Reject the selected requests?")
    expect(dialog.get_by_role("button", name="Cancel")).to_be_focused()
    portal.shot("reject-asks")
    dialog.get_by_role("button", name="Cancel").click()
    expect(reject).to_be_focused()
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.PENDING

    reject.click()
    dialog.get_by_role("button", name="Reject", exact=True).click()
    expect(page.get_by_role("status").filter(has_text=f"Rejected #{allocation.pk}.")).to_be_visible()
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.REJECTED


def test_approve_shows_it_is_busy_while_it_posts(portal: Portal) -> None:
    """Approving takes one to two seconds on a busy portal: the form says it is busy meanwhile (what
    the page looked like at that moment is noted in the tab's session storage, read afterwards)."""
    page = portal.page
    allocation = _pending(portal)
    portal.login("nlp_admin")
    portal.nav("Approvals")
    page.get_by_label(f"Select request #{allocation.pk}").check()
    page.evaluate("""() => {
        const button = document.querySelector('button[value="approve"]');
        new MutationObserver(() => {
            if (button.form.getAttribute('aria-busy') === 'true' && !sessionStorage.getItem('seen')) {
                sessionStorage.setItem('seen', JSON.stringify({
                    form: button.form.getAttribute('aria-busy'), button: button.getAttribute('aria-disabled'),
                    reject: document.querySelector('button[value="reject"]').getAttribute('aria-disabled')}));
            }
        }).observe(button.form, {attributes: true, subtree: true});
    }""")
    page.get_by_role("button", name="Approve selected").click()
    expect(page.get_by_role("status").filter(has_text=f"Approved #{allocation.pk}.")).to_be_visible()
    seen = page.evaluate("() => JSON.parse(sessionStorage.getItem('seen'))")
    assert seen == {"form": "true", "button": "true", "reject": None}

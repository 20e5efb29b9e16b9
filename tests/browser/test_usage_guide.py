"""The "use it" panel in a real browser, under the deployed Content-Security-Policy: the Copy
button (portal.js, no inline script) appears and puts the Pod example on the clipboard."""

from __future__ import annotations

import datetime

import pytest
import yaml
from django.utils import timezone
from playwright.sync_api import expect

from allocations.grants import services
from allocations.models import AllocationState
from tests.browser.conftest import Portal

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_allocation_page_shows_the_use_it_panel_and_copies_the_pod_example(portal: Portal) -> None:
    page, world = portal.page, portal.world
    start = timezone.now()
    allocation = services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.mig, quantity=2, priority_class=world.standard,
        starts_at=start, ends_at=start + datetime.timedelta(days=2), justification="use it",
    )
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.ACTIVE
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    portal.login("nlp_member")
    page.goto(f"/allocations/{allocation.pk}/")
    panel = page.locator("#usage-guide")
    expect(panel.get_by_role("heading", name="Use it")).to_be_visible()
    expect(panel.locator("#guide-namespace")).to_have_text("nlp-llm")
    expect(panel.locator("#guide-resources")).to_contain_text("nvidia.com/mig-1g.10gb")
    copy = panel.locator('button[data-copy="guide-pod"]')
    expect(copy).to_be_visible()
    copy.click()
    expect(copy).to_have_text("Copied")
    copied = yaml.safe_load(page.evaluate("navigator.clipboard.readText()"))
    limits = copied["spec"]["containers"][0]["resources"]["limits"]
    assert (copied["kind"], copied["spec"]["priorityClassName"], limits["nvidia.com/mig-1g.10gb"]) == (
        "Pod", "gpu-standard", "2")
    portal.shot("use-it-panel")
    assert not portal.console_errors

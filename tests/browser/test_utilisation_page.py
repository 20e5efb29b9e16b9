"""The utilisation page in a real browser, under the deployed Content-Security-Policy: its charts
are inline SVG that renders without any script or style the policy would block."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import Portal
from tests.telemetry.usage_history import HOUR, aligned_now, fill, grant

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_utilisation_page_draws_its_charts(portal: Portal) -> None:
    page, world = portal.page, portal.world
    now = aligned_now()
    allocation = grant(world, since=now - 6 * HOUR, quantity=2, until=now)
    fill(allocation, start=now - 6 * HOUR, end=now - 2 * HOUR, activity=0.4)
    fill(allocation, start=now - 2 * HOUR, end=now, activity=None)
    portal.login("nlp_member")
    portal.nav("Utilisation")
    expect(page.get_by_role("heading", name="Utilisation", level=1)).to_be_visible()
    page.get_by_role("list", name="Range").get_by_role("link", name="Day").click()
    expect(page.locator("#headline")).to_have_text("40 % of allocated GPU-equivalents used")
    chart = page.locator("svg#chart-total")
    expect(chart).to_be_visible()
    box = chart.bounding_box()
    assert box is not None and box["width"] > 300 and box["height"] > 80
    expect(chart.locator("path.chart-used").first).to_be_attached()
    expect(chart.locator("path.chart-unknown")).to_have_count(1)
    expect(page.locator("#department-nlp svg.util-chart")).to_be_visible()
    portal.shot("utilisation-day")
    assert not [error for error in portal.console_errors if "Content Security Policy" in error]

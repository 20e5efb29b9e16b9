"""Charts and the GPU map by keyboard, in a real browser under the deployed Content-Security-Policy:
a chart's buckets are reached with Tab and the arrow keys and read out under it (and on hover);
each GPU box is focusable, names its GPU, grant and busy value, and opens its grant; its labels
stay legible on a phone."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Portal
from tests.telemetry.usage_history import HOUR, aligned_now, fill, grant

pytestmark = pytest.mark.django_db(transaction=True)


def tab_to(page: Page, selector: str, *, presses: int = 120) -> None:
    """Press Tab until the focused element matches ``selector``."""
    for _ in range(presses):
        page.keyboard.press("Tab")
        if page.evaluate("(selector) => document.activeElement.matches(selector)", selector):
            return
    raise AssertionError(f"Tab never reached {selector}")


def test_a_charts_values_are_read_on_keyboard_focus_and_on_hover(portal: Portal) -> None:
    page, world = portal.page, portal.world
    now = aligned_now()
    allocation = grant(world, since=now - 6 * HOUR, quantity=2, until=now)
    fill(allocation, start=now - 6 * HOUR, end=now, activity=0.5)
    portal.login("nlp_member")
    portal.nav("Utilisation")
    page.get_by_role("list", name="Range").get_by_role("link", name="Day").click()
    chart = page.locator("svg#chart-total")
    expect(chart).to_be_visible()
    readout = page.locator("#chart-total-readout")

    tab_to(page, "svg#chart-total .chart-point")
    focused = page.evaluate("document.activeElement.getAttribute('aria-label')")
    assert "UTC:" in focused and "GPU-eq. allocated" in focused
    expect(readout).to_have_text(focused)
    portal.shot("chart-focused")
    page.keyboard.press("End")  # the arrow keys (Home, End) move along the chart
    last = page.evaluate("document.activeElement.getAttribute('aria-label')")
    assert last != focused
    expect(readout).to_have_text(last)
    page.keyboard.press("ArrowLeft")
    before_last = page.evaluate("document.activeElement.getAttribute('aria-label')")
    assert before_last not in (focused, last)
    expect(readout).to_have_text(before_last)
    # one tab stop per chart: Tab leaves it rather than walking every bucket
    page.keyboard.press("Tab")
    assert not page.evaluate("document.activeElement.matches('svg#chart-total .chart-point')")

    point = chart.locator('.chart-point[aria-label*="2 GPU-eq. allocated, 1 busy"]').first  # the measured hours
    point.hover()
    expect(readout).to_have_text(point.get_attribute("aria-label") or "")
    # the time labels stay inside the chart
    box = chart.bounding_box()
    assert box is not None
    for label in chart.locator("text.chart-time").all():
        inner = label.bounding_box()
        assert inner is not None and inner["x"] + inner["width"] <= box["x"] + box["width"] + 0.5
    assert not [error for error in portal.console_errors if "Content Security Policy" in error]


def test_each_gpu_box_is_focusable_names_its_grant_and_opens_it(portal: Portal) -> None:
    page, world = portal.page, portal.world
    now = aligned_now()
    held = grant(world, since=now - HOUR)
    row = held.reservations.select_related("node").get()
    page.set_viewport_size({"width": 390, "height": 844})  # a phone
    portal.login("platform")
    page.goto(f"/platform/clusters/{world.cluster.pk}/")
    tile = page.locator(f'a.gpu-tile[href="/allocations/{held.pk}/"]')
    expect(tile).to_have_count(1)
    name = tile.get_attribute("aria-label") or ""
    assert name.startswith(f"GPU {row.gpu_indices[0]} on {row.node.name}: grant #{held.pk} (nlp, 1 × a100)")
    assert "busy" in name
    expect(page.get_by_role("link", name=name)).to_have_count(1)  # its accessible name

    tab_to(page, f'a.gpu-tile[href="/allocations/{held.pk}/"]', presses=200)
    portal.shot("gpu-focused")
    # labels legible on a phone: page text at the page's size, not an SVG scaled down
    size = tile.locator(".gpu-label").first.evaluate("element => parseFloat(getComputedStyle(element).fontSize)")
    assert size >= 12
    free = page.locator("span.gpu-tile[tabindex='0']").first
    expect(free).to_have_attribute("aria-label", f"GPU {0 if row.gpu_indices[0] else 1} on {row.node.name}: free; busy: unknown")
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name=f"Allocation #{held.pk}", level=1)).to_be_visible()

"""Live fragments in a real browser, on a desktop and on a phone: while an answer is late the panel
is busy and, after 300 ms, shows a spinner; when the answer fails the panel says so, with a Retry
button that works; and the request form's verdict comes before the sharing explainer."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, Route, ViewportSize, expect

from frontend.views.approvals import OUTLOOK_ROWS
from tests.browser.conftest import Portal
from tests.frontend.conftest import pending

pytestmark = pytest.mark.django_db(transaction=True)

VIEWPORTS = [pytest.param(ViewportSize(width=1366, height=900), id="desktop"),
             pytest.param(ViewportSize(width=390, height=844), id="phone")]
FEEDBACK = re.compile(r"/allocations/new/feedback/")
LOADING_DELAY_MS = 300

# When each request was sent and when its spinner first showed (performance.now(), in the page).
TIMING = """() => {
  window.__live = {};
  document.body.addEventListener("htmx:beforeRequest", () => { window.__live = {sent: performance.now()}; });
  new MutationObserver(() => {
    if (window.__live.sent !== undefined && window.__live.spinner === undefined
        && document.querySelector("[data-live-status] .spinner")) {
      window.__live.spinner = performance.now();
    }
  }).observe(document.body, {childList: true, subtree: true});
}"""


def held_routes(page: Page, pattern: re.Pattern[str]) -> list[Route]:
    """Hold every request to ``pattern`` until the test lets it go: an answer as late as wanted."""
    held: list[Route] = []

    def hold(route: Route) -> None:
        held.append(route)

    page.route(pattern, hold)
    return held


def wait_for(page: Page, held: list[Any]) -> None:
    for _ in range(100):
        if held:
            return
        page.wait_for_timeout(50)
    raise AssertionError("no request was held")


def fill_request(portal: Portal) -> None:
    page, world = portal.page, portal.world
    page.goto("/allocations/new/")
    page.get_by_label("Project").select_option(str(world.llm.pk))
    page.get_by_label("Flavor").select_option(str(world.a100.pk))
    page.get_by_label("Quantity").fill("2")
    expect(page.locator("#feedback-verdict")).to_have_text("This request fits today.")


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_the_request_feedback_shows_loading_and_then_its_verdict_first(portal: Portal, viewport: ViewportSize) -> None:
    page = portal.page
    page.set_viewport_size(viewport)
    portal.login("nlp_member")
    fill_request(portal)
    feedback = page.locator("#feedback")
    # The verdict comes before the sharing explainer, in the page and on the screen.
    assert page.evaluate("""() => Boolean(document.querySelector("#feedback-verdict").compareDocumentPosition(
        document.querySelector("#feedback-sharing")) & Node.DOCUMENT_POSITION_FOLLOWING)""")
    title, verdict = page.locator("#feedback-title").bounding_box(), page.locator("#feedback-verdict").bounding_box()
    sharing = page.locator("#feedback-sharing").bounding_box()
    assert title and verdict and sharing
    assert verdict["y"] < sharing["y"] and verdict["y"] + verdict["height"] - title["y"] < viewport["height"] / 4

    page.evaluate(TIMING)
    held = held_routes(page, FEEDBACK)
    page.get_by_label("Quantity").fill("3")
    expect(feedback).to_have_attribute("aria-busy", "true")
    wait_for(page, held)
    expect(feedback.get_by_role("status")).to_have_text("Checking the request…")
    expect(feedback.locator(".spinner")).to_be_visible()
    portal.shot("feedback-loading")
    timing = page.evaluate("window.__live")
    assert timing["spinner"] - timing["sent"] >= LOADING_DELAY_MS - 5, timing  # never before 300 ms
    held[0].continue_()
    page.unroute(FEEDBACK)
    expect(page.locator("#feedback-gpu-eq")).to_contain_text("3 (3 × 1 of NVIDIA-A100")
    expect(feedback).not_to_have_attribute("aria-busy", "true")
    expect(feedback.locator("[data-live-status]")).to_have_count(0)

    # A quick answer shows no spinner at all.
    page.evaluate(TIMING)
    page.route(FEEDBACK, lambda route: route.fulfill(
        status=200, content_type="text/html",
        body='<h2 id="feedback-title">What this request means</h2><p id="quick">quick</p>'))
    page.get_by_label("Quantity").fill("4")
    expect(page.locator("#quick")).to_be_visible()
    page.wait_for_timeout(2 * LOADING_DELAY_MS)
    assert "spinner" not in page.evaluate("window.__live")
    page.unroute(FEEDBACK)


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_a_failed_feedback_says_so_and_retry_works(portal: Portal, viewport: ViewportSize) -> None:
    page = portal.page
    page.set_viewport_size(viewport)
    portal.login("nlp_member")
    fill_request(portal)
    feedback = page.locator("#feedback")

    page.route(FEEDBACK, lambda route: route.fulfill(status=500, content_type="text/html", body="<h1>Server error</h1>"))
    page.get_by_label("Quantity").fill("3")
    alert = feedback.get_by_role("alert")
    expect(alert).to_contain_text("The request could not be checked: the portal answered 500")
    expect(feedback).not_to_have_attribute("aria-busy", "true")
    expect(feedback.locator(".spinner")).to_have_count(0)
    portal.shot("feedback-error")

    page.unroute(FEEDBACK)
    page.route(FEEDBACK, lambda route: route.abort("connectionrefused"))
    alert.get_by_role("button", name="Retry").click()
    expect(alert).to_contain_text("The request could not be checked: the portal could not be reached")

    page.unroute(FEEDBACK)
    feedback.get_by_role("button", name="Retry").click()
    expect(page.locator("#feedback-gpu-eq")).to_contain_text("3 (3 × 1 of NVIDIA-A100")  # the fields as they are now
    expect(page.locator("#feedback-verdict")).to_have_text("This request fits today.")
    expect(feedback.get_by_role("alert")).to_have_count(0)
    portal.shot("feedback-retried")


def test_approval_rows_beyond_the_first_load_their_decision_with_loading_and_retry(portal: Portal) -> None:
    page, world = portal.page, portal.world
    page.set_viewport_size({"width": 390, "height": 844})
    requests = [pending(world) for _ in range(OUTLOOK_ROWS + 1)]
    lazy = requests[-1]
    route = re.compile(rf"/approvals/{lazy.pk}/decision/")
    page.route(route, lambda answer: answer.fulfill(status=503, content_type="text/html", body="busy"))
    portal.login("nlp_admin")
    portal.nav("Approvals")
    cell = page.locator(f"#queue-quota-{lazy.pk}")
    cell.scroll_into_view_if_needed()
    expect(cell.get_by_role("alert")).to_contain_text(f"Request #{lazy.pk} could not be checked: the portal answered 503")
    portal.shot("approvals-row-error")

    page.unroute(route)
    held = held_routes(page, route)
    cell.get_by_role("button", name="Retry").click()
    expect(cell).to_have_attribute("aria-busy", "true")
    wait_for(page, held)
    expect(cell.get_by_role("status")).to_contain_text("Checking quota and what approval would do…")
    held[0].continue_()
    page.unroute(route)
    expect(cell).to_contain_text("✓ nlp · a100 units: 0 + 1 of 8")
    expect(page.locator(f"#queue-outlook-{lazy.pk}")).to_contain_text("Approval would reclaim nothing")
    expect(cell).not_to_have_attribute("aria-busy", "true")
    portal.shot("approvals-row-loaded")
    assert not [error for error in portal.console_errors if "Content Security Policy" in error]


def test_a_form_answered_400_shows_its_field_errors_not_a_failure(portal: Portal) -> None:
    """A form's 400 carries its fields' errors: swapped in like any answer (HTMX alone drops it)."""
    page = portal.page
    portal.login("nlp_member")
    page.get_by_role("link", name="API tokens").click()
    page.get_by_role("button", name="Create token").click()
    panel = page.locator("#token-create")
    expect(panel).to_contain_text("No token was created: please correct the fields marked below.")
    expect(page.locator("[data-live-status]")).to_have_count(0)
    expect(panel).not_to_have_attribute("aria-busy", "true")

"""Every page of every role at a desktop's and a phone's width: nothing wider than the screen, and
no text under WCAG's contrast ratio.

One crawl per role (one sign-in each, one browser for all): the pages its navigation reaches and
the pages those link to, one level deep (one page per kind of address: one allocation's page, one
department's). Each page is measured at 1366 × 900 and at 390 × 844: the document never scrolls
sideways, and no element reaches past the screen's right edge unless a scroll box holds it (a wide
table may scroll inside its box; it may not widen the page). On a phone the approvals queue shows
the columns an admin decides by (justification, quota impact, fit, what approval would do, and the
box that selects the request) without scrolling sideways, and the dashboard's State column whole.
The navigation folds under a Menu button that the keyboard opens and closes.
"""

from __future__ import annotations

import datetime
import re
from decimal import Decimal
from urllib.parse import urlsplit

import pytest
from django.utils import timezone
from playwright.sync_api import Page, ViewportSize, expect
from pytest_django.live_server_helper import LiveServer

from allocations.grants import changes, services
from allocations.models import Quota, RuleChangeKind
from allocations.rules.changes import rule_change_propose
from allocations.windows.services import quota_window_create
from allocations.windows.terms import WindowTerms
from tests.browser.conftest import Portal
from tests.conftest import World
from whatifs.services import what_if_create, what_if_run

pytestmark = pytest.mark.django_db(transaction=True)

DESKTOP = ViewportSize(width=1366, height=900)
PHONE = ViewportSize(width=390, height=844)
ROLES = ("nlp_member", "nlp_admin", "auditor", "platform")
# Addresses that are no page to lay out: downloads, the API and its docs, Django's admin, signing out.
NOT_PAGES = re.compile(r"^/(api|admin|static|oidc|logout|audit/export|audit/custody/export|notifications/unsubscribe)(/|$)")
JUSTIFICATION = ("Fine-tuning a seven-billion-parameter model for the speech team's paper deadline; the "
                 "evaluation runs every night and needs the whole node to itself")

# What reaches past the right edge of the screen, outside any box that clips or scrolls it. A box
# clips what its containing blocks lead back to it: an absolutely positioned element skips the
# static boxes between it and its positioned ancestor, which is how a visually hidden label inside
# a scroll box can still widen the page.
OVERFLOWING = """() => {
  const width = window.innerWidth;
  const style = (el) => getComputedStyle(el);
  const clips = (el) => ["auto", "scroll", "hidden", "clip"].includes(style(el).overflowX);
  const containingBlock = (el) => {
    const position = style(el).position;
    if (position === "fixed") { return null; }
    let up = el.parentElement;
    if (position === "absolute") {
      while (up && style(up).position === "static" && style(up).transform === "none") { up = up.parentElement; }
    }
    return up;
  };
  const held = (el) => {
    for (let box = containingBlock(el); box && box !== document.body; box = containingBlock(box)) {
      if (clips(box)) { return true; }
    }
    return false;
  };
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
    (el.classList.length ? "." + Array.from(el.classList).join(".") : "");
  const found = [];
  for (const el of document.body.querySelectorAll("*")) {
    const box = el.getBoundingClientRect();
    if ((box.width || box.height) && box.right > width + 0.5 && !held(el)) {
      found.push(name(el) + " to " + Math.round(box.right) + " px: " + (el.textContent || "").trim().slice(0, 40));
    }
  }
  return {scrollWidth: document.documentElement.scrollWidth, width: width, found: found.slice(0, 5)};
}"""

# Text whose contrast with what is behind it is under WCAG 2.2's AA ratio (1.4.3): 4.5:1, or 3:1
# for large text (24 px, or 18.66 px bold). What is behind a text is the first box up from it with a
# background colour that is not transparent (the page's white at the top); text that is not shown,
# disabled controls and SVG (whose labels are drawn with fill) are left out.
LOW_CONTRAST = """() => {
  const parse = (value) => {
    const m = value.match(/rgba?\\(([^)]+)\\)/);
    if (!m) { return null; }
    const parts = m[1].split(",").map((v) => parseFloat(v));
    return {r: parts[0], g: parts[1], b: parts[2], a: parts.length > 3 ? parts[3] : 1};
  };
  const luminance = (c) => {
    const lin = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * lin(c.r) + 0.7152 * lin(c.g) + 0.0722 * lin(c.b);
  };
  const behind = (el) => {
    for (let up = el; up; up = up.parentElement) {
      const bg = parse(getComputedStyle(up).backgroundColor);
      if (bg && bg.a > 0.5) { return bg; }
    }
    return {r: 255, g: 255, b: 255, a: 1};
  };
  const found = [];
  for (const el of document.body.querySelectorAll("*")) {
    if (el.closest("svg") || el.disabled || el.closest("[hidden], [aria-hidden='true']")) { continue; }
    const own = Array.from(el.childNodes).some((n) => n.nodeType === 3 && n.textContent.trim());
    const box = el.getBoundingClientRect();
    const style = getComputedStyle(el);
    if (!own || !box.width || !box.height || style.visibility !== "visible" || parseFloat(style.opacity) < 0.1) { continue; }
    if (style.clip === "rect(0px, 0px, 0px, 0px)" || style.clipPath === "inset(50%)" || box.width <= 1) { continue; }
    const fg = parse(style.color);
    if (!fg) { continue; }
    const [hi, lo] = [luminance(fg), luminance(behind(el))].sort((a, b) => b - a);
    const ratio = (hi + 0.05) / (lo + 0.05);
    const size = parseFloat(style.fontSize);
    const large = size >= 24 || (size >= 18.66 && parseInt(style.fontWeight, 10) >= 700);
    if (ratio < (large ? 3 : 4.5)) {
      found.push(el.tagName.toLowerCase() + (el.className && typeof el.className === "string" ? "." + el.className.split(" ").join(".") : "") +
                 " " + ratio.toFixed(2) + ":1: " + el.textContent.trim().slice(0, 30));
    }
  }
  return found.slice(0, 5);
}"""

# Whether the cells of the named columns show whole: inside the screen and inside the box that
# scrolls them, if any.
COLUMNS_SHOWN = """([caption, headers]) => {
  const table = Array.from(document.querySelectorAll("table")).find((t) => t.caption && t.caption.textContent.trim() === caption);
  if (!table) { return ["no table " + caption]; }
  const names = Array.from(table.tHead.rows[0].cells).map((cell) => cell.textContent.trim());
  const missing = [];
  const inside = (box, outer) => box.left >= outer.left - 0.5 && box.right <= outer.right + 0.5;
  for (const row of table.tBodies[0].rows) {
    for (const header of headers) {
      const cell = row.cells[header === "" ? 0 : names.indexOf(header)];
      const box = cell ? cell.getBoundingClientRect() : null;
      const scroller = cell ? cell.closest(".table-scroll") : null;
      const screen = {left: 0, right: window.innerWidth};
      if (!box || !box.width || !inside(box, screen) || (scroller && !inside(box, scroller.getBoundingClientRect()))) {
        missing.push((header || "selection") + " of row " + row.rowIndex);
      }
    }
  }
  return missing;
}"""


def seed(world: World) -> None:
    """Something in every queue and list: a pending request, a grant with a pending resize, a quota
    window, a rule change waiting for a decision and a what-if's result."""
    start = timezone.now()

    def request(quantity: int, justification: str) -> int:
        return services.allocation_request(
            actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=quantity,
            priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=14),
            justification=justification,
        ).pk

    granted = services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=request(1, "evaluation"))
    changes.allocation_resize(actor=world.users["nlp_member"], allocation_id=granted.pk, quantity=2,
                              justification="the evaluation grew")
    request(2, JUSTIFICATION)
    quota = Quota.objects.get(department=world.nlp, flavor=None)
    begins = start + datetime.timedelta(days=1)
    quota_window_create(
        actor=world.users["nlp_admin"], quota_id=quota.pk, justification="conference deadline",
        terms=WindowTerms(kind="temporary", begins_at=begins, ends_at=begins + datetime.timedelta(days=2),
                          limit_delta=Decimal(4)),
    )
    rule_change_propose(actor=world.users["platform"], kind=RuleChangeKind.QUOTA_UPDATE, quota_id=quota.pk,
                        fields={"limit": Decimal(12)})
    asked = what_if_create(actor=world.users["nlp_admin"], changes=[{"kind": "quota", "department": "nlp", "limit_delta": 4}],
                           history_days=7, title="raise nlp's limit by 4")
    what_if_run(what_if_id=asked.pk)  # its result page, with tables and charts per department


def pages_of(page: Page, selector: str) -> list[str]:
    """The portal's pages linked from ``selector`` on this page, one per kind of address."""
    hrefs: list[str] = page.eval_on_selector_all(
        selector, "links => links.filter((a) => !a.hasAttribute('download')).map((a) => a.href)")
    here = urlsplit(page.url).netloc
    found: dict[str, str] = {}
    for href in hrefs:
        parts = urlsplit(href)
        if parts.netloc != here or parts.query or NOT_PAGES.match(parts.path):
            continue
        found.setdefault(re.sub(r"\d+", "N", parts.path), parts.path)
    return list(found.values())


def measure(page: Page, path: str, problems: list[str]) -> None:
    for size in (DESKTOP, PHONE):
        page.set_viewport_size(size)
        result = page.evaluate(OVERFLOWING)
        where = f"{path} at {size['width']} px"
        if result["scrollWidth"] > result["width"]:
            problems.append(f"{where}: the document is {result['scrollWidth']} px wide")
        problems.extend(f"{where}: {found}" for found in result["found"])
        problems.extend(f"{where}: low contrast {found}" for found in page.evaluate(LOW_CONTRAST))
    page.set_viewport_size(DESKTOP)


def crawl(portal: Portal, persona: str, problems: list[str]) -> int:
    page = portal.page
    portal.login(persona)
    seen: set[str] = set()
    first = pages_of(page, "nav[aria-label='Main'] a[href]")
    queue = ["/", *first]
    for depth in (0, 1):
        deeper: list[str] = []
        for path in queue:
            kind = re.sub(r"\d+", "N", path)
            if kind in seen:
                continue
            seen.add(kind)
            response = page.goto(path)
            assert response is not None and response.ok, f"{persona}: {path} answered {response and response.status}"
            page.wait_for_load_state("networkidle")
            measure(page, f"{persona} {path}", problems)
            if depth == 0:
                deeper.extend(pages_of(page, "main a[href]"))
        queue = deeper
    portal.logout()
    return len(seen)


def test_no_page_of_any_role_is_wider_than_the_screen(portal: Portal) -> None:
    seed(portal.world)
    problems: list[str] = []
    counts = {persona: crawl(portal, persona, problems) for persona in ROLES}
    assert not problems, "\n".join(problems)
    # Every role reaches its pages and some beyond them (a guard against a crawl that finds nothing).
    assert counts["nlp_member"] >= 8 and counts["platform"] >= 20, counts


def test_on_a_phone_the_deciding_columns_and_the_state_show_whole(portal: Portal) -> None:
    page = portal.page
    seed(portal.world)
    page.set_viewport_size(PHONE)
    portal.login("nlp_admin")
    page.goto("/approvals/")
    expect(page.get_by_role("heading", name="Approvals", level=1)).to_be_visible()
    deciding = ["", "Justification", "Quota impact", "Fit", "On approval"]
    assert page.evaluate(COLUMNS_SHOWN, ["Requests waiting for a decision", deciding]) == []
    assert page.evaluate(COLUMNS_SHOWN, ["Changes waiting for a decision", ["Justification", "Decision"]]) == []
    expect(page.get_by_label(re.compile(r"^Select request #\d+$"))).to_be_in_viewport()
    portal.shot("approvals-phone")
    portal.logout()
    portal.login("nlp_member")
    assert page.evaluate(COLUMNS_SHOWN, ["Allocations you requested or that belong to your projects",
                                         ["#", "State", "Expires (UTC)", "Cluster sync"]]) == []
    portal.shot("dashboard-phone")


def test_on_a_phone_the_menu_folds_and_the_keyboard_opens_it(portal: Portal) -> None:
    page = portal.page
    page.set_viewport_size(PHONE)
    portal.login("platform")
    menu = page.get_by_role("button", name="Menu", exact=True)
    approvals = page.get_by_role("navigation", name="Main").get_by_role("link", name="Approvals", exact=True)
    expect(menu).to_have_attribute("aria-expanded", "false")
    expect(approvals).to_be_hidden()
    topbar_height = page.locator(".topbar").bounding_box()
    assert topbar_height is not None and topbar_height["height"] < 64  # one row, not four to six
    page.keyboard.press("Tab")  # the skip link
    page.keyboard.press("Tab")  # the brand
    page.keyboard.press("Tab")
    expect(menu).to_be_focused()
    outline = menu.evaluate("b => { const s = getComputedStyle(b); return [s.outlineStyle, s.outlineWidth]; }")
    assert outline[0] != "none" and outline[1] != "0px"  # the focus shows
    page.keyboard.press("Enter")
    expect(menu).to_have_attribute("aria-expanded", "true")
    expect(approvals).to_be_visible()
    portal.shot("menu-open")
    page.keyboard.press("Tab")
    expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Dashboard")).to_be_focused()
    page.keyboard.press("Escape")
    expect(menu).to_have_attribute("aria-expanded", "false")
    expect(menu).to_be_focused()
    expect(approvals).to_be_hidden()
    menu.click()
    approvals.click()
    expect(page.get_by_role("heading", name="Approvals", level=1)).to_be_visible()
    expect(page.get_by_role("button", name="Menu", exact=True)).to_have_attribute("aria-expanded", "false")
    # At a desktop's width there is no button: the links show.
    page.set_viewport_size(DESKTOP)
    expect(menu).to_be_hidden()
    expect(approvals).to_be_visible()


def test_without_scripts_the_phone_menu_stays_open_in_one_row(portal: Portal, live_server: LiveServer) -> None:
    browser = portal.page.context.browser
    assert browser is not None
    quiet = browser.new_context(base_url=live_server.url, viewport=PHONE, java_script_enabled=False)
    try:
        page = quiet.new_page()
        page.goto("/login/")
        page.get_by_label("Username").fill("platform")
        page.get_by_label("Password").fill("pw-platform")
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Dashboard", level=1)).to_be_visible()
        nav = page.get_by_role("navigation", name="Main")
        expect(page.get_by_role("button", name="Menu", exact=True)).to_be_hidden()
        expect(nav.get_by_role("link", name="Dashboard", exact=True)).to_be_visible()
        box = nav.locator("ul").bounding_box()
        assert box is not None and box["height"] < 56  # one row of links that scrolls sideways
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    finally:
        quiet.close()


def test_the_contrast_check_finds_pale_text_and_passes_the_portals_muted_grey(portal: Portal) -> None:
    page = portal.page
    page.set_content(
        '<body style="background:#fff"><p id="pale" style="color:#aaa">Pale words</p>'
        '<p style="color:#57606a">Muted words</p><h1 style="color:#949494;font-size:32px">Large grey</h1>'
        '<div style="background:#0b5cad"><span style="color:#fff">On blue</span></div></body>'
    )
    assert [found.split(" ")[0] for found in page.evaluate(LOW_CONTRAST)] == ["p"]  # only the pale one: 2.32:1

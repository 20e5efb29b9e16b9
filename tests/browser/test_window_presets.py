"""The quota-window form in a browser, on a desktop and on a phone: a department admin chooses the
day/night preset, picks the hours, the weekdays and the zone from its list; the form shows the rule
it writes and the window asked for has that rule."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from allocations.models import Quota
from allocations.models.windows import QuotaWindow, WindowState
from tests.browser.conftest import Portal
from tests.browser.test_portal import every_control_is_labelled

pytestmark = pytest.mark.django_db(transaction=True)

RULE = "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=20;BYMINUTE=0"


@pytest.mark.parametrize(("width", "height"), [(1366, 900), (390, 844)], ids=["desktop", "phone"])
def test_a_day_night_preset_writes_the_rule_of_the_window_asked_for(portal: Portal, width: int, height: int) -> None:
    page, world = portal.page, portal.world
    page.set_viewport_size({"width": width, "height": height})
    quota = Quota.objects.get(department=world.nlp, flavor=None)
    portal.login("nlp_admin")
    page.goto(f"/calendar/{world.nlp.pk}/")
    form = page.locator("#window-form")
    form.get_by_role("combobox", name=re.compile(r"^Quota")).select_option(str(quota.pk))
    # Only the chosen preset's part shows: once, by default.
    expect(page.locator("#window-when")).to_be_visible()
    expect(page.locator("#window-daily")).to_be_hidden()
    form.get_by_label("Day/night: the same hours on chosen weekdays").check()
    expect(page.locator("#window-daily")).to_be_visible()
    expect(page.locator("#window-when")).to_be_hidden()
    form.get_by_label("Time zone").select_option("Europe/Berlin")
    form.get_by_label("Each day from").fill("20:00")
    form.get_by_label("Each day until").fill("08:00")
    for day in ("Sat", "Sun"):
        form.get_by_label(day, exact=True).uncheck()
    expect(page.locator("#daily-rule")).to_have_text(RULE)
    form.get_by_label("Limit: change by").fill("4")
    form.get_by_label("Justification").fill("Nightly training on working days")
    every_control_is_labelled(portal)
    box = form.get_by_label("Each day until").bounding_box()
    assert box is not None and box["x"] + box["width"] <= width  # nothing runs off a phone's screen
    portal.shot(f"window-day-night-{width}")
    form.get_by_role("button", name="Ask for approval").click()
    expect(page.get_by_role("status").filter(has_text="waits for a platform admin's approval")).to_be_visible()
    window = QuotaWindow.objects.get()
    assert (window.rrule, window.timezone, window.duration_minutes, window.state) == (
        RULE, "Europe/Berlin", 720, WindowState.PENDING)
    expect(page.locator(f"#window-{window.pk}")).to_contain_text(RULE)
    portal.shot(f"window-listed-{width}")
    assert not [error for error in portal.console_errors if "Content Security Policy" in error]

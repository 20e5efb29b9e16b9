"""The department page in a real browser: a department admin adds a member and a project member
through the page's HTMX forms, under the deployed security headers."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tenants.models import Membership, Role
from tests.browser.conftest import Portal

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_department_admin_adds_a_member_and_a_project_member_on_the_page(portal: Portal) -> None:
    page, world = portal.page, portal.world
    User.objects.create_user(username="ada", email="ada@example.org", password="x")
    portal.login("nlp_admin")
    portal.nav("Department")
    page.get_by_role("link", name="NLP").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Department NLP")

    page.get_by_label("User", exact=True).fill("ada@example.org")
    page.get_by_label("Role", exact=True).select_option(Role.RESEARCHER.value)
    page.get_by_role("button", name="Add", exact=True).click()
    expect(page.locator(".messages")).to_contain_text("ada is now researcher of nlp.")
    expect(page.locator("#members")).to_contain_text("ada")
    assert Membership.objects.filter(user__username="ada", department=world.nlp, role=Role.RESEARCHER).exists()

    page.get_by_label("Add member").first.fill("ghost")
    page.get_by_role("button", name="Add to nlp-llm").click()
    expect(page.locator(f"#project-{world.llm.pk}-user-error")).to_contain_text("No account named ghost")
    expect(page.get_by_label("Add member").first).to_have_value("ghost")

    page.get_by_label("Add member").first.fill("ada")
    page.get_by_role("button", name="Add to nlp-llm").click()
    expect(page.locator(".messages")).to_contain_text("ada added to project nlp-llm.")
    expect(page.locator(f"#project-{world.llm.pk}")).to_contain_text("ada")
    portal.shot("department-page")
    assert not [error for error in portal.console_errors if "Content Security Policy" in error or "htmx" in error]


def _focused(page: Page) -> str:
    """The focused element as tag#id.class, for the assertions on focus."""
    return str(page.evaluate("() => { const e = document.activeElement; return e ? "
                             "`${e.tagName.toLowerCase()}#${e.id}.${e.className}` : ''; }"))


def test_removing_a_project_member_asks_first_and_the_focus_lands_on_what_happened(portal: Portal) -> None:
    page, world = portal.page, portal.world
    portal.login("nlp_admin")
    page.goto(f"/departments/{world.nlp.pk}/")
    remove = page.get_by_role("button", name=f"Remove nlp_member from {world.llm.slug}")

    remove.click()  # asks: nothing is removed yet
    dialog = page.get_by_role("alertdialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text(f"Remove nlp_member from project {world.llm.slug}?")
    expect(dialog.get_by_role("button", name="Cancel")).to_be_focused()
    portal.shot("remove-asks")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    expect(remove).to_be_focused()  # back where the keyboard was
    assert world.llm.members.filter(username="nlp_member").exists()

    remove.click()
    page.keyboard.press("Escape")  # Escape cancels too
    expect(dialog).to_be_hidden()
    assert world.llm.members.filter(username="nlp_member").exists()

    remove.click()
    dialog.get_by_role("button", name="Remove nlp_member").click()
    message = page.get_by_role("status").filter(has_text=f"nlp_member removed from project {world.llm.slug}.")
    expect(message).to_be_visible()
    expect(message).to_be_focused()  # not <body>: the message saying what happened
    assert not world.llm.members.filter(username="nlp_member").exists()
    portal.shot("removed")


def test_an_unknown_user_stays_typed_with_its_error_next_to_it_and_the_focus_on_it(portal: Portal) -> None:
    page, world = portal.page, portal.world
    page.set_viewport_size({"width": 390, "height": 844})  # a phone
    portal.login("nlp_admin")
    page.goto(f"/departments/{world.nlp.pk}/")
    field = page.get_by_label("User", exact=True)
    field.fill("ghost@example.org")
    page.get_by_role("button", name="Add", exact=True).click()
    error = page.locator("#member-user-error")
    expect(error).to_contain_text("No account named ghost@example.org")
    expect(field).to_have_value("ghost@example.org")
    expect(field).to_be_focused()
    expect(field).to_have_attribute("aria-invalid", "true")
    # Each label sits with its own control: on the same row, just before it, or right above it.
    for label in page.locator("main form.inline-form label[for]").all():
        control = page.locator(f"#{label.get_attribute('for')}")
        box, target = label.bounding_box(), control.bounding_box()
        assert box is not None and target is not None
        same_row = abs((box["y"] + box["height"] / 2) - (target["y"] + target["height"] / 2)) < target["height"]
        assert same_row and 0 <= target["x"] - (box["x"] + box["width"]) < 24, label.text_content()
    portal.shot("unknown-user-on-a-phone")


def test_the_department_page_posts_without_scripts_after_a_page_that_asks(portal: Portal) -> None:
    """Without the dialog (scripts off), a removal answers with a page that asks first."""
    page, world = portal.page, portal.world
    portal.login("nlp_admin")
    page.goto(f"/departments/{world.nlp.pk}/")
    page.evaluate("() => document.querySelectorAll('form[data-confirm]').forEach(f => f.removeAttribute('data-confirm'))")
    page.get_by_role("button", name=f"Remove nlp_member from {world.llm.slug}").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Remove nlp_member from project {world.llm.slug}?")
    assert world.llm.members.filter(username="nlp_member").exists()
    page.get_by_role("button", name=f"Yes, remove nlp_member from {world.llm.slug}").click()
    expect(page.get_by_role("status").filter(has_text="nlp_member removed")).to_be_visible()

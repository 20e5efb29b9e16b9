"""The department page in a real browser: a department admin adds a member and a project member
through the page's HTMX forms, under the deployed security headers."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

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
    expect(page.locator(".messages")).to_contain_text("No account named ghost")

    page.get_by_label("Add member").first.fill("ada")
    page.get_by_role("button", name="Add to nlp-llm").click()
    expect(page.locator(".messages")).to_contain_text("ada added to project nlp-llm.")
    expect(page.locator(f"#project-{world.llm.pk}")).to_contain_text("ada")
    portal.shot("department-page")
    assert not [error for error in portal.console_errors if "Content Security Policy" in error or "htmx" in error]

"""The "API tokens" page in a real browser, under the deployed Content-Security-Policy: a user
creates a token (HTMX swaps the panel and the list), copies it with the button, the API accepts it,
and revoking it after the confirmation makes the API refuse it."""

from __future__ import annotations

import pytest
import requests
from playwright.sync_api import expect
from pytest_django.live_server_helper import LiveServer

from tenants.models import PersonalAccessToken
from tests.browser.conftest import Portal

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_user_creates_copies_uses_and_revokes_a_token(portal: Portal, live_server: LiveServer) -> None:
    page = portal.page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    portal.login("nlp_member")
    page.get_by_role("link", name="API tokens").click()
    expect(page.get_by_role("heading", name="API tokens", level=1)).to_be_visible()
    expect(page.locator("#tokens")).to_contain_text("You have no tokens yet.")

    page.get_by_label("Name").fill("laptop CLI")
    page.get_by_label("Read and write").check()
    page.get_by_label("Expires in").select_option("30")
    page.get_by_role("button", name="Create token").click()
    expect(page.get_by_role("heading", name="Token “laptop CLI” created")).to_be_visible()
    expect(page.locator("#tokens")).to_contain_text("laptop CLI")  # the list, swapped out of band
    text = page.locator("#new-token").input_value()
    assert text.startswith("gpp_") and len(text) == 59
    page.get_by_role("button", name="Copy to clipboard").click()
    expect(page.locator('[data-copy-status="new-token"]')).to_have_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == text
    portal.shot("token-created")

    api = f"{live_server.url}/api/v1/me/"
    assert requests.get(api, headers={"Authorization": f"Bearer {text}"}, timeout=30).json()["username"] == "nlp_member"

    page.reload()
    expect(page.locator("#new-token")).to_have_count(0)  # shown once
    row = page.locator("#tokens tbody tr").first
    expect(row).to_contain_text("Read and write")
    row.get_by_role("link", name="Revoke").click()
    expect(page.get_by_role("heading", name="Revoke token “laptop CLI”?")).to_be_visible()
    portal.shot("token-revoke-confirm")
    page.get_by_role("button", name="Yes, revoke it").click()
    expect(page.locator(".messages").first).to_contain_text("is revoked")
    expect(page.locator("#tokens")).to_contain_text("revoked")
    portal.shot("token-revoked")
    assert PersonalAccessToken.objects.get().revoked_at is not None
    assert requests.get(api, headers={"Authorization": f"Bearer {text}"}, timeout=30).status_code == 401
    assert not [error for error in portal.console_errors if "Content Security Policy" in error]

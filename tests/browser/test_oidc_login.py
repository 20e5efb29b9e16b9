"""Signing in through an OpenID Connect provider in a real browser: the login page's button, the
provider's own pages (oidc-provider-mock on loopback), back to the portal with the mapped role, and
a logout that ends the provider's session too, under the deployed Content-Security-Policy."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tenants.models import ExternalGroupMapping, Membership, Role
from tests.browser.conftest import Portal
from tests.identity.oidc_support import MockProvider, mock_provider_fixture  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_person_signs_in_through_the_provider_gets_the_mapped_role_and_logs_out_of_both(
    portal: Portal, mock_provider: MockProvider,
) -> None:
    world = portal.world
    ExternalGroupMapping.objects.create(source="oidc", external_group="/gpu/nlp", department=world.nlp,
                                        role=Role.RESEARCHER)
    mock_provider.user_set("grace-sub", {"preferred_username": "grace", "email": "grace@example.org",
                                         "groups": ["/gpu/nlp"]})
    page = portal.page
    page.goto("/login/")
    portal.shot("login-page")
    page.get_by_role("link", name="Sign in with Campus SSO").click()

    expect(page).to_have_url(re.compile(re.escape(mock_provider.issuer) + r"/oauth2/authorize\?"))
    portal.shot("provider")
    page.get_by_placeholder("sub").fill("grace-sub")
    page.get_by_role("button", name="Authorize").click()

    expect(page.get_by_role("heading", name="Dashboard", level=1)).to_be_visible()
    portal.shot("signed-in")
    expect(page.get_by_role("button", name=re.compile(r"^Log out"))).to_contain_text("grace")
    assert {(m.department.slug, m.role, m.source) for m in Membership.objects.filter(user__username="grace")} == {
        ("nlp", Role.RESEARCHER, "oidc")
    }

    page.get_by_role("button", name=re.compile(r"^Log out")).click()
    expect(page).to_have_url(re.compile(re.escape(mock_provider.issuer) + r"/oauth2/end_session\?"))
    portal.shot("provider-end-session")
    page.get_by_role("button", name="End session").click()
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    assert not [error for error in portal.console_errors if "Content Security Policy" in error]

"""The portal's security headers (``frontend.middleware``), as installed in settings."""

from __future__ import annotations

from typing import Any

import pytest

from frontend.middleware import CONTENT_SECURITY_POLICY
from tests.conftest import World
from tests.frontend.conftest import Login

pytestmark = pytest.mark.django_db

MIDDLEWARE = "frontend.middleware.PortalSecurityHeadersMiddleware"


@pytest.fixture(autouse=True)
def _with_headers(settings: Any) -> None:
    if MIDDLEWARE not in settings.MIDDLEWARE:
        settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]


def test_it_sends_a_strict_policy_with_portal_pages(world: World, login: Login) -> None:
    response = login("nlp_member").get("/")
    policy = response["Content-Security-Policy"]
    assert policy == CONTENT_SECURITY_POLICY
    assert "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy
    assert "frame-ancestors 'none'" in policy
    assert response["Cache-Control"] == "no-store"
    assert response["X-Frame-Options"] == "DENY"
    assert login(None).get("/login/")["Content-Security-Policy"] == CONTENT_SECURITY_POLICY


def test_it_leaves_the_api_docs_and_admin_alone(world: World, login: Login) -> None:
    assert "Content-Security-Policy" not in login("platform").get("/api/docs/")


def test_it_loads_no_script_or_style_from_elsewhere(world: World, login: Login) -> None:
    html = login("platform").get("/").content.decode()
    assert "<script>" not in html and "style=" not in html and "<style" not in html
    assert "https://" not in html and "http://" not in html

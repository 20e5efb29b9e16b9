"""The 403 and 404 pages, and CSRF protection of every state-changing form."""

from __future__ import annotations

from unittest import mock

import pytest
from django.test import Client, override_settings

from allocations.models import AllocationState
from tests.conftest import World
from tests.frontend.conftest import Login, pending

pytestmark = pytest.mark.django_db


def test_it_answers_an_outsider_with_the_not_found_page(world: World, login: Login) -> None:
    allocation = pending(world)
    for persona in ("vision_member", "vision_admin", "speech_member", "nobody"):
        response = login(persona).get(f"/allocations/{allocation.pk}/")
        assert response.status_code == 404, persona
        html = response.content.decode()
        assert "Not found" in html and "portal tests" not in html
    assert login("nlp_member").get(f"/allocations/{allocation.pk}/").status_code == 200


def test_it_does_not_let_an_outsider_change_an_allocation(world: World, login: Login) -> None:
    allocation = pending(world)
    client = login("vision_member")
    assert client.post(f"/allocations/{allocation.pk}/release/").status_code == 404
    assert client.post(f"/allocations/{allocation.pk}/renew/", {"ends_at": "2099-01-01T00:00"}).status_code == 404
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.PENDING


def test_it_answers_an_unknown_address_with_the_portal_404(world: World, login: Login) -> None:
    response = login("nlp_member").get("/no/such/page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "Not found" in html and 'aria-label="Main"' in html


def test_it_explains_a_forbidden_page(world: World, login: Login) -> None:
    response = login("nlp_member").get("/platform/clusters/")
    assert response.status_code == 403
    html = response.content.decode()
    assert "Not allowed" in html and "Only platform admins manage clusters" in html


def test_it_refuses_state_changes_without_a_csrf_token(world: World) -> None:
    allocation = pending(world)
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.users["nlp_admin"])
    posts = {
        "/allocations/new/": {"project": world.llm.pk},
        f"/allocations/{allocation.pk}/release/": {},
        f"/allocations/{allocation.pk}/renew/": {"ends_at": "2099-01-01T00:00"},
        "/approvals/": {"selected": [allocation.pk], "decision": "approve"},
        "/logout/": {},
    }
    for url, data in posts.items():
        response = client.post(url, data)
        assert response.status_code == 403, url
        assert "Form expired" in response.content.decode(), url
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.PENDING


def test_it_accepts_a_post_carrying_the_token_of_its_page(world: World) -> None:
    allocation = pending(world)
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.users["nlp_member"])
    client.get(f"/allocations/{allocation.pk}/")
    token = client.cookies["csrftoken"].value
    response = client.post(f"/allocations/{allocation.pk}/release/", {"csrfmiddlewaretoken": token, "confirm": "yes"})
    assert response.status_code == 302
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.CANCELLED


def test_it_serves_reads_only_to_get(world: World, login: Login) -> None:
    client = login("nlp_member")
    assert client.post("/").status_code == 405
    assert client.get(f"/allocations/{pending(world).pk}/release/").status_code == 405


TECHNICAL_404 = "Using the URLconf defined in"


def test_with_debug_on_an_outsider_gets_the_portal_404_page_not_djangos(world: World, login: Login) -> None:
    """make run sets GPUPORTAL_DEBUG: its 404 is still the portal's page, styled under the CSP and
    naming no URL pattern; an unknown path too, and a path without its slash is still redirected."""
    allocation = pending(world)
    with override_settings(DEBUG=True, GPUPORTAL_DEBUG_PAGES=False):
        client = login("vision_member")
        for path in (f"/allocations/{allocation.pk}/", "/no/such/page/"):
            response = client.get(path)
            html = response.content.decode()
            assert response.status_code == 404, path
            assert "Not found" in html and 'aria-label="Main"' in html, path
            assert TECHNICAL_404 not in html and "DEBUG = True" not in html and "approvals/" not in html, path
        assert client.get("/approvals").status_code == 301  # CommonMiddleware's slash redirect still comes first
        api = client.get("/api/v1/allocations/999999/")
        assert api.status_code == 404 and api.json()["error"]["code"] == "not_found"


def test_with_debug_on_a_server_error_is_the_portal_500_page(world: World, login: Login) -> None:
    client = login("nlp_member")
    client.raise_request_exception = False
    with override_settings(DEBUG=True, GPUPORTAL_DEBUG_PAGES=False), \
            mock.patch("frontend.views.allocations.dashboard_allocations", side_effect=RuntimeError("boom")):
        response = client.get("/")
    html = response.content.decode()
    assert response.status_code == 500
    assert "Traceback" not in html and "boom" not in html and "GPU Portal" in html


def test_djangos_technical_pages_only_when_asked_for(world: World, login: Login) -> None:
    with override_settings(DEBUG=True, GPUPORTAL_DEBUG_PAGES=True):
        response = login("nlp_member").get("/no/such/page/")
    assert response.status_code == 404 and TECHNICAL_404 in response.content.decode()

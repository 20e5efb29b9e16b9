"""The 403 and 404 pages, and CSRF protection of every state-changing form."""

from __future__ import annotations

import pytest
from django.test import Client

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

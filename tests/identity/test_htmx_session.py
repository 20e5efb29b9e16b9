"""An HTMX request whose session has expired gets ``HX-Redirect`` to the login page (which HTMX 2
follows whatever the status), naming the page the browser shows as ``next``, instead of the login
page swapped into a fragment. Plain requests keep their ordinary redirect."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.conftest import World

pytestmark = pytest.mark.django_db

FRAGMENT = "/allocations/new/feedback/?quantity=2"


def test_an_htmx_request_of_an_expired_session_is_told_to_load_the_login_page(world: World) -> None:
    answer = Client().get(FRAGMENT, HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL="http://testserver/allocations/new/?project=3")
    assert answer.status_code == 401
    assert answer["HX-Redirect"] == "/login/?next=%2Fallocations%2Fnew%2F%3Fproject%3D3"
    assert answer.content == b""


def test_the_fragment_itself_is_next_when_the_current_page_is_not_ours(world: World) -> None:
    answer = Client().get(FRAGMENT, HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL="https://elsewhere.example/x")
    assert answer["HX-Redirect"] == "/login/?next=%2Fallocations%2Fnew%2Ffeedback%2F%3Fquantity%3D2"


def test_an_htmx_post_of_an_expired_session_is_redirected_too(world: World) -> None:
    answer = Client(enforce_csrf_checks=False).post("/allocations/1/release/", HTTP_HX_REQUEST="true")
    assert answer.status_code == 401 and answer["HX-Redirect"].startswith("/login/?next=")


def test_plain_requests_keep_the_ordinary_redirect_and_signed_in_htmx_requests_are_untouched(world: World) -> None:
    plain = Client().get(FRAGMENT)
    assert plain.status_code == 302 and plain["Location"].startswith("/login/?next=")
    client = Client()
    client.force_login(world.users["nlp_member"])
    signed_in = client.get(FRAGMENT, HTTP_HX_REQUEST="true")
    assert signed_in.status_code == 200 and "HX-Redirect" not in signed_in

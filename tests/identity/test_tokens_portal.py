"""The portal's "API tokens" page: create (the text shown once, not cached), list, revoke after a
confirmation; someone else's token is a 404; with HTMX the form swaps its panel and the list."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from rest_framework.test import APIClient

from audit.models import AuditEvent
from tenants.access_tokens import access_token_create
from tenants.models import PersonalAccessToken
from tests.conftest import World

pytestmark = pytest.mark.django_db
PAGE = "/account/tokens/"
TOKEN_TEXT = re.compile(r'value="(gpp_[A-Za-z0-9]{55})"')


def signed_in(world: World, persona: str) -> Client:
    client = Client()
    client.force_login(world.users[persona])
    return client


def test_the_page_is_linked_for_everyone_signed_in_and_closed_to_anonymous_visitors(world: World) -> None:
    assert Client().get(PAGE).status_code == 302
    for persona in ("nlp_member", "auditor", "nobody"):
        home = signed_in(world, persona).get("/" if persona != "nobody" else PAGE)
        assert f'href="{PAGE}"' in home.content.decode()
    page = signed_in(world, "nobody").get(PAGE)
    assert page.status_code == 200 and "You have no tokens yet." in page.content.decode()


def test_creating_shows_the_token_once_and_it_works_on_the_api(world: World) -> None:
    client = signed_in(world, "nlp_member")
    response = client.post(PAGE, {"name": "laptop", "scope": "write", "expires_in_days": "30"})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    page = response.content.decode()
    match = TOKEN_TEXT.search(page)
    assert match is not None and "shown only this once" in page
    text = match.group(1)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {text}")
    assert api.get("/api/v1/me/").json()["username"] == "nlp_member"

    again = client.get(PAGE).content.decode()
    assert text not in again and text[:16] in again and "laptop" in again
    token = PersonalAccessToken.objects.get(user=world.users["nlp_member"])
    assert token.scope == "write" and 29 <= (token.expires_at - token.created_at).days <= 30
    assert AuditEvent.objects.get(action="access_token.created").details == {"via": "portal"}


def test_a_bad_form_is_a_400_naming_the_field_and_creates_nothing(world: World) -> None:
    client = signed_in(world, "nlp_member")
    response = client.post(PAGE, {"name": "", "scope": "admin", "expires_in_days": "9999"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "No token was created" in page
    for name in ("name", "scope", "expires_in_days"):
        assert re.search(rf'id="id_{name}_error"><p>', page), name
    assert not PersonalAccessToken.objects.exists()


def test_with_htmx_the_form_answers_its_panel_and_the_list_out_of_band(world: World) -> None:
    client = signed_in(world, "nlp_member")
    response = client.post(PAGE, {"name": "ci", "scope": "read", "expires_in_days": "7"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    fragment = response.content.decode()
    assert "<html" not in fragment and 'id="token-create"' in fragment
    assert 'id="token-list"' in fragment and 'hx-swap-oob="true"' in fragment
    assert TOKEN_TEXT.search(fragment) is not None


def test_revoking_asks_first_then_revokes_and_the_token_stops_working(world: World) -> None:
    issued = access_token_create(actor=world.users["nlp_member"], name="old", scope="read")
    client = signed_in(world, "nlp_member")
    url = f"{PAGE}{issued.token.pk}/revoke/"
    confirm = client.get(url)
    assert confirm.status_code == 200 and "Yes, revoke it" in confirm.content.decode()
    assert PersonalAccessToken.objects.get(pk=issued.token.pk).revoked_at is None
    done = client.post(url, follow=True)
    assert done.status_code == 200 and "is revoked" in done.content.decode()
    assert PersonalAccessToken.objects.get(pk=issued.token.pk).revoked_at is not None
    assert AuditEvent.objects.get(action="access_token.revoked").details["via"] == "portal"
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {issued.key}")
    assert api.get("/api/v1/me/").status_code == 401


def test_someone_elses_token_is_a_404_in_the_portal(world: World) -> None:
    issued = access_token_create(actor=world.users["nlp_member"], name="mine", scope="read")
    for persona in ("nlp_admin", "platform"):
        client = signed_in(world, persona)
        assert client.get(f"{PAGE}{issued.token.pk}/revoke/").status_code == 404
        assert client.post(f"{PAGE}{issued.token.pk}/revoke/").status_code == 404
        assert "mine" not in client.get(PAGE).content.decode()
    assert PersonalAccessToken.objects.get(pk=issued.token.pk).revoked_at is None


def test_the_offered_lifetimes_stay_within_the_maximum(world: World, settings: object) -> None:
    settings.GPUPORTAL_TOKEN_MAX_DAYS = 60  # type: ignore[attr-defined]
    page = signed_in(world, "nlp_member").get(PAGE).content.decode()
    offered = re.findall(r'<option value="(\d+)"', page)
    assert offered == ["7", "30", "60"]

"""OpenID Connect sign-in through real providers on loopback (tests/identity/oidc_support.py):
PKCE and nonce (ASVS 10.2.1, 10.5.1), accounts keyed by subject and never by e-mail (10.5.2), the
issuer (10.5.3) and the audience (10.5.4) of the ID token checked, provider groups mapped to roles
with manual grants kept, every sign-in and refusal audited, and logout ending the provider's session."""

from __future__ import annotations

import hashlib
import time
from typing import Any

import jwt
import pytest
from django.contrib.auth.models import User
from django.test import Client

from audit.models import AuditEvent
from tenants.models import ExternalGroupMapping, ExternalIdentity, Membership, Role
from tests.conftest import World
from tests.identity.oidc_support import (  # noqa: F401 (fixtures)
    CLIENT_ID,
    CLIENT_SECRET,
    MockProvider,
    TestIssuer,
    issuer_fixture,
    mock_provider_fixture,
    sso_login,
)

pytestmark = pytest.mark.django_db


def _roles(user: User) -> set[tuple[str, str, str]]:
    return {(m.department.slug, m.role, m.source) for m in Membership.objects.filter(user=user).select_related("department")}


def _signed_in(client: Client) -> User | None:
    user_id = client.session.get("_auth_user_id")
    return User.objects.get(pk=user_id) if user_id else None


def _events(code: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=code).order_by("seq"))


def test_login_through_the_provider_uses_pkce_and_nonce_and_creates_the_account_with_its_mapped_roles(
    world: World, mock_provider: MockProvider,
) -> None:
    ExternalGroupMapping.objects.create(source="oidc", external_group="/gpu/nlp-admins", department=world.nlp,
                                        role=Role.DEPARTMENT_ADMIN)
    mock_provider.user_set("ada-sub", {"preferred_username": "ada", "email": "ada@example.org",
                                       "groups": ["/gpu/nlp-admins", "/unmapped"]})
    client = Client()
    walk = sso_login(client, sub="ada-sub", next_url="/usage/")

    assert walk.authorization["code_challenge_method"] == "S256"
    assert len(walk.authorization["code_challenge"]) == 43
    assert len(walk.authorization["nonce"]) >= 32 and len(walk.authorization["state"]) >= 32
    assert walk.authorization["client_id"] == CLIENT_ID and "openid" in walk.authorization["scope"].split()
    assert walk.callback.status_code == 302 and walk.callback["Location"] == "/usage/"
    user = _signed_in(client)
    assert user is not None and user.username == "ada" and user.email == "ada@example.org"
    assert not user.has_usable_password()
    identity = ExternalIdentity.objects.get(user=user)
    assert (identity.source, identity.issuer, identity.subject) == ("oidc", mock_provider.issuer, "ada-sub")
    assert identity.last_login_at is not None
    assert _roles(user) == {("nlp", Role.DEPARTMENT_ADMIN, "oidc")}
    login = _events("auth.login")[-1]
    assert login.actor_id == user.pk and login.details["via"] == "oidc" and login.details["subject"] == "ada-sub"
    assert [e.target_id for e in _events("account.provisioned_oidc")] == [str(user.pk)]
    assert [e.details["source"] for e in _events("membership.granted")] == ["oidc"]
    assert client.get("/usage/").status_code == 200  # the department admin's page


def test_a_manual_grant_is_kept_when_a_later_login_takes_the_provider_role_away(
    world: World, mock_provider: MockProvider,
) -> None:
    ExternalGroupMapping.objects.create(source="oidc", external_group="nlp-researchers", department=world.nlp,
                                        role=Role.RESEARCHER)
    mock_provider.user_set("bob-sub", {"preferred_username": "bob", "groups": "nlp-researchers;staff"})  # ;-separated
    sso_login(Client(), sub="bob-sub")
    bob = User.objects.get(username="bob")
    Membership.objects.create(user=bob, department=world.vision, role=Role.RESEARCHER)  # granted by hand (manual)
    assert _roles(bob) == {("nlp", Role.RESEARCHER, "oidc"), ("vision", Role.RESEARCHER, "manual")}

    mock_provider.user_set("bob-sub", {"preferred_username": "bob", "groups": ["staff"]})
    client = Client()
    sso_login(client, sub="bob-sub")

    assert _signed_in(client) == bob
    assert _roles(bob) == {("vision", Role.RESEARCHER, "manual")}
    revoked = _events("membership.revoked")[-1]
    assert revoked.details["source"] == "oidc" and revoked.department_id == world.nlp.pk


def test_accounts_are_keyed_by_issuer_and_subject_never_by_email(world: World, mock_provider: MockProvider) -> None:
    existing = User.objects.create_user("carol", email="carol@example.org", password="pw-carol")
    for sub in ("sub-a", "sub-b"):
        mock_provider.user_set(sub, {"preferred_username": "carol", "email": "carol@example.org"})
    first, second = Client(), Client()
    sso_login(first, sub="sub-a")
    sso_login(second, sub="sub-b")

    a, b = _signed_in(first), _signed_in(second)
    assert a is not None and b is not None
    assert len({existing.pk, a.pk, b.pk}) == 3  # the same e-mail, three accounts
    assert (a.username, b.username) == ("carol-2", "carol-3")
    again = Client()
    sso_login(again, sub="sub-a")
    assert _signed_in(again) == a


def test_a_deactivated_account_cannot_sign_in_through_the_provider(world: World, mock_provider: MockProvider) -> None:
    mock_provider.user_set("dan-sub", {"preferred_username": "dan"})
    sso_login(Client(), sub="dan-sub")
    User.objects.filter(username="dan").update(is_active=False)
    client = Client()
    walk = sso_login(client, sub="dan-sub")
    assert walk.callback.status_code == 302 and walk.callback["Location"] == "/login/"
    assert _signed_in(client) is None
    failed = _events("auth.login_failed")[-1]
    assert failed.details["via"] == "oidc" and failed.details["subject"] == "dan-sub"


def test_the_callback_refuses_a_replayed_state(world: World, mock_provider: MockProvider) -> None:
    mock_provider.user_set("eve-sub", {"preferred_username": "eve"})
    client = Client()
    walk = sso_login(client, sub="eve-sub")
    assert walk.callback.status_code == 302
    callback = walk.callback.request["PATH_INFO"] + "?" + walk.callback.request["QUERY_STRING"]
    assert client.get(callback).status_code == 400  # the state was used up
    stranger = Client()
    assert stranger.get(callback)["Location"] == "/login/"  # another browser never asked for it
    assert _signed_in(stranger) is None
    assert AuditEvent.objects.filter(action="auth.login").count() == 1


# ----------------------------------------------------------------------------- the ID token's checks


def _hs256(issuer: TestIssuer) -> Any:
    return lambda claims, nonce: jwt.encode(claims, CLIENT_SECRET, algorithm="HS256", headers={"kid": "k1"})


def _unsigned(issuer: TestIssuer) -> Any:
    return lambda claims, nonce: jwt.encode(claims, None, algorithm="none")  # type: ignore[arg-type]


def _foreign_key(issuer: TestIssuer) -> Any:
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return lambda claims, nonce: issuer.mint(claims, key=key)


REFUSED_ID_TOKENS: dict[str, tuple[dict[str, Any], Any]] = {
    # ASVS 10.5.3: an ID token of another issuer (a mix-up)
    "another issuer": ({"iss": "https://idp.elsewhere.example"}, None),
    # ASVS 10.5.4: an ID token issued to another client
    "another audience": ({"aud": "someone-else"}, None),
    "our client among others, azp another": ({"aud": [CLIENT_ID, "other"], "azp": "other"}, None),
    # ASVS 10.5.1: the nonce of another authorization request
    "another nonce": ({"nonce": "replayed-nonce"}, None),
    "expired": ({"exp": int(time.time()) - 600, "iat": int(time.time()) - 900}, None),
    "issued in the future": ({"iat": int(time.time()) + 3600, "exp": int(time.time()) + 7200}, None),
    "not valid yet": ({"nbf": int(time.time()) + 3600}, None),
    "no subject": ({"sub": ""}, None),
    "HS256 with the client secret": ({}, _hs256),
    "unsigned (alg none)": ({}, _unsigned),
    "signed by a key the provider does not publish": ({}, _foreign_key),
}


@pytest.mark.parametrize("case", list(REFUSED_ID_TOKENS), ids=list(REFUSED_ID_TOKENS))
def test_an_id_token_that_fails_a_check_is_refused_and_audited(world: World, test_issuer: TestIssuer, case: str) -> None:
    claims, signer = REFUSED_ID_TOKENS[case]
    test_issuer.id_claims = claims
    test_issuer.id_signer = signer(test_issuer) if signer else None
    client = Client()
    walk = sso_login(client)
    assert walk.callback.status_code == 302 and walk.callback["Location"] == "/login/"
    assert _signed_in(client) is None
    assert not ExternalIdentity.objects.exists()
    assert _events("auth.login_failed")[-1].details["via"] == "oidc"
    assert "did not succeed" in str([str(m) for m in client.get("/login/").context["messages"]])


def test_the_code_is_exchanged_with_the_pkce_verifier_of_the_authorization_request(world: World, test_issuer: TestIssuer) -> None:
    client = Client()
    walk = sso_login(client)
    assert _signed_in(client) is not None
    verifier = test_issuer.token_requests[-1]["code_verifier"]
    import base64

    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    assert challenge == walk.authorization["code_challenge"]
    assert test_issuer.token_requests[-1]["client_id"] == CLIENT_ID


def test_the_provider_keys_are_cached_and_fetched_again_for_an_unknown_key_id(world: World, test_issuer: TestIssuer) -> None:
    sso_login(Client())
    sso_login(Client())
    assert test_issuer.hits["/jwks"] == 1 and test_issuer.hits["/.well-known/openid-configuration"] == 1
    test_issuer.key_add("k2")  # the provider rotates its key
    test_issuer.id_signer = lambda claims, nonce: test_issuer.mint(claims, kid="k2")
    from tenants.oidc import provider

    provider._entry(test_issuer.issuer).keys_at = time.monotonic() - provider.JWKS_MIN_REFRESH - 1
    client = Client()
    sso_login(client)
    assert _signed_in(client) is not None
    assert test_issuer.hits["/jwks"] == 2


def test_an_unreachable_provider_sends_the_browser_back_to_the_login_page(world: World, test_issuer: TestIssuer) -> None:
    test_issuer.down = True
    client = Client()
    answer = client.get("/oidc/login/")
    assert answer.status_code == 302 and answer["Location"] == "/login/"
    assert "cannot be reached" in str([str(m) for m in client.get("/login/").context["messages"]])


# ----------------------------------------------------------------------------- the login page, logout


def test_the_login_page_offers_the_provider_and_password_sign_in_can_be_turned_off(
    world: World, test_issuer: TestIssuer, settings: Any,
) -> None:
    page = Client().get("/login/?next=/usage/").content.decode()
    assert "Sign in with Campus SSO" in page and 'href="/oidc/login/?next=/usage/"' in page
    assert 'name="password"' in page

    settings.GPUPORTAL_AUTH_PASSWORD = False
    page = Client().get("/login/").content.decode()
    assert "Sign in with Campus SSO" in page and 'name="password"' not in page
    refused = Client().post("/login/", {"username": "nlp_member", "password": "pw-nlp_member"})
    assert refused.status_code == 403 and "_auth_user_id" not in refused.client.session
    token = Client().post("/api/v1/auth/token/", {"username": "nlp_member", "password": "pw-nlp_member"},
                          content_type="application/json")
    assert token.status_code == 403


def test_without_oidc_the_login_page_has_no_provider_and_its_urls_do_not_exist(world: World) -> None:
    assert "Sign in with" not in Client().get("/login/").content.decode()
    assert Client().get("/oidc/login/").status_code == 404
    assert Client().get("/oidc/callback/?code=x&state=y").status_code == 404


def test_logout_ends_the_provider_session_with_the_id_token_hint(world: World, mock_provider: MockProvider) -> None:
    mock_provider.user_set("fay-sub", {"preferred_username": "fay"})
    client = Client()
    sso_login(client, sub="fay-sub")
    id_token = client.session["oidc_id_token"]
    answer = client.post("/logout/")
    assert answer.status_code == 302
    location = answer["Location"]
    assert location.startswith(f"{mock_provider.issuer}/oauth2/end_session?")
    from urllib.parse import parse_qs, urlsplit

    query = parse_qs(urlsplit(location).query)
    assert query["id_token_hint"] == [id_token]
    assert query["post_logout_redirect_uri"] == ["http://testserver/login/"]
    assert _signed_in(client) is None
    assert _events("auth.logout")[-1].details == {"via": "oidc"}


def test_a_password_session_logs_out_locally(world: World, test_issuer: TestIssuer) -> None:
    client = Client()
    client.force_login(world.users["nlp_member"])
    answer = client.post("/logout/")
    assert answer.status_code == 302 and answer["Location"] == "/login/"
    assert _events("auth.logout")[-1].details == {"via": "portal"}

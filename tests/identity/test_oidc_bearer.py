"""The provider's access tokens on the API (``Authorization: Bearer <JWT>``): checked locally against
the provider's published keys (ASVS 9.1.2 algorithms, 10.3.1 audience), the account found by subject;
every failure a 401 with the API's JSON error, never a 500."""

from __future__ import annotations

import datetime
import time
from typing import Any

import jwt
import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from tenants.models import ExternalIdentity, PersonalAccessToken
from tests.conftest import World
from tests.identity.oidc_support import CLIENT_ID, CLIENT_SECRET, TestIssuer, issuer_fixture  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture
def ada(world: World, test_issuer: TestIssuer) -> User:
    """nlp_member, who signed in through the provider once (subject ``subject-1``)."""
    user = world.users["nlp_member"]
    ExternalIdentity.objects.create(user=user, source="oidc", issuer=test_issuer.issuer, subject="subject-1")
    return user


def me(token: str) -> Any:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.get("/api/v1/me/")


def access(issuer: TestIssuer, **overrides: Any) -> dict[str, Any]:
    return issuer.claims(typ="Bearer", azp="cli", **overrides)


def test_a_valid_access_token_acts_as_its_subjects_account(ada: User, test_issuer: TestIssuer) -> None:
    answer = me(test_issuer.mint(access(test_issuer)))
    assert answer.status_code == 200 and answer.json()["username"] == ada.username
    es256 = me(test_issuer.mint(access(test_issuer, aud=[CLIENT_ID, "account"]), kid="e1", alg="ES256"))
    assert es256.status_code == 200


def test_the_api_audience_setting_decides_which_tokens_are_for_the_api(ada: User, test_issuer: TestIssuer, settings: Any) -> None:
    settings.GPUPORTAL_OIDC_AUDIENCE = "gpuportal-api"
    assert me(test_issuer.mint(access(test_issuer))).status_code == 401  # aud: the client id only
    assert me(test_issuer.mint(access(test_issuer, aud=["account", "gpuportal-api"]))).status_code == 200


def _hs256(issuer: TestIssuer) -> str:
    return jwt.encode(access(issuer), CLIENT_SECRET, algorithm="HS256", headers={"kid": "k1"})


def _none(issuer: TestIssuer) -> str:
    return jwt.encode(access(issuer), None, algorithm="none")  # type: ignore[arg-type]


def _tampered(issuer: TestIssuer) -> str:
    header, payload, signature = issuer.mint(access(issuer)).split(".")
    other = issuer.mint(access(issuer, sub="subject-2")).split(".")[1]
    return ".".join([header, other, signature])


REFUSED: dict[str, Any] = {
    "expired": lambda i: i.mint(access(i, exp=int(time.time()) - 120, iat=int(time.time()) - 900)),
    "another audience": lambda i: i.mint(access(i, aud="account")),
    "another issuer": lambda i: i.mint(access(i, iss="https://idp.elsewhere.example")),
    "an unknown subject": lambda i: i.mint(access(i, sub="never-signed-in")),
    "an ID token": lambda i: i.mint(i.claims(typ="ID")),
    "a refresh token type": lambda i: i.mint(access(i), headers={"typ": "refresh+jwt"}),
    "HS256": _hs256,
    "unsigned": _none,
    "a tampered payload": _tampered,
    "garbage with two dots": lambda i: "not.a.jwt",
    "base64 but not JSON": lambda i: "eyJhbGciOiJSUzI1NiJ9.bm90IGpzb24.c2ln",
    "an unknown key id": lambda i: i.mint(access(i), headers={"kid": "nope"}),
}


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_a_bad_access_token_is_a_401_with_the_json_error(ada: User, test_issuer: TestIssuer, case: str) -> None:
    answer = me(REFUSED[case](test_issuer))
    assert answer.status_code == 401, answer.content
    assert answer.json()["error"]["code"] == "authentication_failed"
    assert answer["WWW-Authenticate"]


def test_a_deactivated_accounts_token_is_refused(ada: User, test_issuer: TestIssuer) -> None:
    token = test_issuer.mint(access(test_issuer))
    assert me(token).status_code == 200
    User.objects.filter(pk=ada.pk).update(is_active=False)
    assert me(token).status_code == 401


def test_an_unreachable_provider_is_a_401_not_a_500(ada: User, test_issuer: TestIssuer) -> None:
    token = test_issuer.mint(access(test_issuer))
    test_issuer.down = True
    answer = me(token)
    assert answer.status_code == 401 and "unreachable" in answer.json()["error"]["message"]


def test_keys_already_fetched_keep_serving_while_the_provider_is_down(ada: User, test_issuer: TestIssuer) -> None:
    token = test_issuer.mint(access(test_issuer))
    assert me(token).status_code == 200
    test_issuer.down = True
    assert me(token).status_code == 200  # no request to the provider per call
    assert test_issuer.hits["/jwks"] == 1


def test_made_up_key_ids_do_not_make_the_portal_hammer_the_provider(ada: User, test_issuer: TestIssuer) -> None:
    assert me(test_issuer.mint(access(test_issuer))).status_code == 200
    for number in range(20):
        assert me(test_issuer.mint(access(test_issuer), headers={"kid": f"made-up-{number}"})).status_code == 401
    assert test_issuer.hits["/jwks"] <= 2


def test_bearer_values_that_are_not_jwts_are_left_to_the_other_authentication_classes(ada: User, test_issuer: TestIssuer) -> None:
    # A personal access token's value is the access-token class's (which refuses this malformed one),
    # not a JWT the provider's class would try and refuse as such.
    answer = me("gpp_abcdef0123456789")
    assert answer.status_code == 401 and "access token" in answer.json()["error"]["message"].lower()
    # A value no class claims is no credential at all.
    answer = me("opaque-value")
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "not_authenticated"
    assert me("a.b").status_code == 401


def test_with_oidc_off_a_jwt_is_no_credential(world: World, test_issuer: TestIssuer, settings: Any) -> None:
    ExternalIdentity.objects.create(user=world.users["nlp_member"], source="oidc", issuer=test_issuer.issuer,
                                    subject="subject-1")
    token = test_issuer.mint(access(test_issuer))
    settings.GPUPORTAL_OIDC_ISSUER = None
    answer = me(token)
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "not_authenticated"


def test_a_personal_token_made_with_an_access_token_lives_no_longer_than_that_access_token(
    ada: User, test_issuer: TestIssuer,
) -> None:
    exp = int(time.time()) + 600
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {test_issuer.mint(access(test_issuer, exp=exp))}")
    later = datetime.datetime.fromtimestamp(exp, tz=datetime.UTC) + datetime.timedelta(days=30)

    refused = client.post("/api/v1/auth/tokens/", {"name": "ci", "expires_at": later.isoformat()}, format="json")
    assert refused.status_code == 400, refused.content
    assert "outlive" in refused.json()["error"]["fields"]["expires_at"][0]
    assert not PersonalAccessToken.objects.filter(user=ada).exists()

    default = client.post("/api/v1/auth/tokens/", {"name": "ci"}, format="json")
    assert default.status_code == 201, default.content
    assert PersonalAccessToken.objects.get(user=ada).expires_at == datetime.datetime.fromtimestamp(exp, tz=datetime.UTC)

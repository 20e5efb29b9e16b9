"""Personal access tokens over the API: created by their owner, shown once, stored hashed, scoped,
expiring, revoked; the password token endpoint now issues one; garbage never answers 500."""

from __future__ import annotations

import datetime
import hashlib
import io
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from allocations.models import Allocation
from audit.models import AuditEvent
from tenants.access_tokens import USE_RECORD_INTERVAL, access_token_create
from tenants.identity import account_deactivate
from tenants.models import PersonalAccessToken
from tests.conftest import World

pytestmark = pytest.mark.django_db
TOKENS = "/api/v1/auth/tokens/"


def bearer(text: str, scheme: str = "Bearer") -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{scheme} {text}")
    return client


def create(world: World, persona: str = "nlp_member", **body: Any) -> dict[str, Any]:
    response = world.client(persona).post(TOKENS, {"name": "laptop", **body}, format="json")
    assert response.status_code == 201, response.content
    assert response["Cache-Control"] == "no-store"
    return dict(response.json())


def test_a_token_is_created_used_and_revoked_and_then_refused(world: World) -> None:
    created = create(world, scope="write")
    text = created["token"]
    assert text.startswith("gpp_") and len(text) == 59 and text.startswith(created["prefix"])
    assert created["state"] == "active" and created["last_used_at"] is None

    me = bearer(text).get("/api/v1/me/")
    assert me.status_code == 200 and me.json()["username"] == "nlp_member"
    listed = world.client("nlp_member").get(TOKENS).json()["results"]
    assert [row["prefix"] for row in listed] == [created["prefix"]]
    assert listed[0]["last_used_at"] is not None
    assert "token" not in listed[0]

    assert world.client("nlp_member").delete(f"{TOKENS}{created['id']}/").status_code == 204
    refused = bearer(text).get("/api/v1/me/")
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "authentication_failed"
    assert "revoked" in refused.json()["error"]["message"]
    assert refused["WWW-Authenticate"].startswith("Bearer")
    revoked = AuditEvent.objects.get(action="access_token.revoked")
    assert revoked.actor_username == "nlp_member" and revoked.details["prefix"] == created["prefix"]
    created_event = AuditEvent.objects.get(action="access_token.created")
    assert created_event.after["prefix"] == created["prefix"] and created_event.after["scope"] == "write"


def test_revoking_twice_changes_nothing_the_second_time(world: World) -> None:
    created = create(world)
    client = world.client("nlp_member")
    assert client.delete(f"{TOKENS}{created['id']}/").status_code == 204
    assert client.delete(f"{TOKENS}{created['id']}/").status_code == 204
    assert AuditEvent.objects.filter(action="access_token.revoked").count() == 1
    assert client.get(f"{TOKENS}?state=revoked").json()["count"] == 1
    assert client.get(f"{TOKENS}?state=active").json()["count"] == 0


def test_the_token_scheme_works_too_so_the_cli_and_scripts_keep_working(world: World) -> None:
    text = create(world, scope="write")["token"]
    assert bearer(text, "Token").get("/api/v1/me/").status_code == 200
    assert bearer(text, "bearer").get("/api/v1/me/").status_code == 200


def test_an_expired_token_is_refused_with_401(world: World) -> None:
    created = create(world)
    PersonalAccessToken.objects.filter(pk=created["id"]).update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    response = bearer(created["token"]).get("/api/v1/me/")
    assert response.status_code == 401
    assert "expired" in response.json()["error"]["message"]
    assert world.client("nlp_member").get(f"{TOKENS}{created['id']}/").json()["state"] == "expired"


def test_a_read_token_reads_but_refuses_a_write_with_403_naming_the_scope(world: World) -> None:
    text = create(world, scope="read")["token"]
    client = bearer(text)
    assert client.get("/api/v1/allocations/").status_code == 200
    body = {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": 1, **world.window(), "justification": "x"}
    response = client.post("/api/v1/allocations/", body, format="json")
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "insufficient_scope" and "scope is read" in error["message"]
    assert client.delete(TOKENS + "1/").status_code == 403
    assert not Allocation.objects.exists()


def test_a_write_token_writes(world: World) -> None:
    text = create(world, scope="write")["token"]
    body = {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": 1, **world.window(), "justification": "x"}
    assert bearer(text).post("/api/v1/allocations/", body, format="json").status_code == 201


def test_the_scope_defaults_to_read(world: World) -> None:
    assert create(world)["scope"] == "read"


def test_only_the_hash_is_stored_and_the_secret_is_nowhere_in_the_database_or_the_audit_log(world: World) -> None:
    created = create(world, scope="write")
    text = created["token"]
    row = PersonalAccessToken.objects.get(pk=created["id"])
    assert row.key_hash == hashlib.sha256(text.encode()).hexdigest()
    secret_part = text[len(created["prefix"]):]
    bearer(text).get("/api/v1/me/")  # a use too
    dump = io.StringIO()
    # every table the runtime role may read (the audit quarantine is closed to it on PostgreSQL)
    call_command("dumpdata", exclude=["audit.AuditQuarantine", "audit.AuditQuarantinedEvent"], stdout=dump)
    assert secret_part not in dump.getvalue() and text not in dump.getvalue()
    for event in AuditEvent.objects.all():
        assert secret_part not in str([event.before, event.after, event.details])


def test_others_tokens_read_as_missing_even_for_a_platform_admin(world: World) -> None:
    created = create(world, "nlp_member")
    for persona in ("nlp_admin", "platform", "nobody"):
        client = world.client(persona)
        assert client.get(f"{TOKENS}{created['id']}/").status_code == 404
        assert client.delete(f"{TOKENS}{created['id']}/").status_code == 404
        assert client.get(TOKENS).json()["count"] == 0
    assert bearer(created["token"]).get("/api/v1/me/").status_code == 200


@pytest.mark.parametrize(
    ("days", "message"),
    [(-1, "in the future"), (0, "in the future"), (366, "At most 365 days")],
)
def test_an_expiry_in_the_past_or_beyond_the_maximum_is_a_400_naming_expires_at(world: World, days: int, message: str) -> None:
    expires_at = timezone.now() + datetime.timedelta(days=days)
    response = world.client("nlp_member").post(TOKENS, {"name": "x", "expires_at": expires_at.isoformat()}, format="json")
    assert response.status_code == 400
    fields = response.json()["error"]["fields"]
    assert list(fields) == ["expires_at"] and message in fields["expires_at"][0]
    assert not PersonalAccessToken.objects.exists()


def test_the_maximum_and_the_default_follow_the_settings(world: World, settings: Any) -> None:
    settings.GPUPORTAL_TOKEN_MAX_DAYS = 30
    now = timezone.now()
    refused = world.client("nlp_member").post(
        TOKENS, {"name": "x", "expires_at": (now + datetime.timedelta(days=31)).isoformat()}, format="json"
    )
    assert refused.status_code == 400 and "At most 30 days" in refused.json()["error"]["fields"]["expires_at"][0]
    within = create(world, expires_at=(now + datetime.timedelta(days=29)).isoformat())
    assert within["expires_at"].startswith((now + datetime.timedelta(days=29)).date().isoformat())
    default = create(world)  # the default (90) is capped by the maximum
    expiry = datetime.datetime.fromisoformat(default["expires_at"])
    assert abs(expiry - (now + datetime.timedelta(days=30))) < datetime.timedelta(minutes=1)
    settings.GPUPORTAL_TOKEN_MAX_DAYS = 365
    expiry = datetime.datetime.fromisoformat(create(world)["expires_at"])
    assert abs(expiry - (now + datetime.timedelta(days=90))) < datetime.timedelta(minutes=1)


def test_bad_fields_are_400s_naming_them(world: World) -> None:
    client = world.client("nlp_member")
    for body, field in (({"name": ""}, "name"), ({"name": "x" * 101}, "name"), ({"name": "x", "scope": "admin"}, "scope"),
                        ({"name": "x", "expires_at": "soon"}, "expires_at"), ({"name": "x", "user": 1}, "user")):
        response = client.post(TOKENS, body, format="json")
        assert response.status_code == 400 and field in response.json()["error"]["fields"], (body, response.content)


def test_a_token_cannot_mint_a_token_that_outlives_it(world: World) -> None:
    parent = create(world, scope="write", expires_at=(timezone.now() + datetime.timedelta(days=2)).isoformat())
    client = bearer(parent["token"])
    later = (timezone.now() + datetime.timedelta(days=30)).isoformat()
    refused = client.post(TOKENS, {"name": "child", "expires_at": later}, format="json")
    assert refused.status_code == 400 and "outlive" in refused.json()["error"]["fields"]["expires_at"][0]
    child = client.post(TOKENS, {"name": "child"}, format="json").json()
    assert child["expires_at"] <= parent["expires_at"]


def test_use_is_recorded_at_most_once_a_minute(world: World) -> None:
    created = create(world)
    client = bearer(created["token"])
    client.get("/api/v1/me/")
    first = PersonalAccessToken.objects.get(pk=created["id"]).last_used_at
    assert first is not None
    client.get("/api/v1/me/")
    assert PersonalAccessToken.objects.get(pk=created["id"]).last_used_at == first
    earlier = first - USE_RECORD_INTERVAL - datetime.timedelta(seconds=1)
    PersonalAccessToken.objects.filter(pk=created["id"]).update(last_used_at=earlier)
    client.get("/api/v1/me/")
    latest = PersonalAccessToken.objects.get(pk=created["id"]).last_used_at
    assert latest is not None and latest > first


def test_an_inactive_users_token_is_refused(world: World) -> None:
    text = create(world, scope="write")["token"]
    user = world.users["nlp_member"]
    user.is_active = False
    user.save(update_fields=["is_active"])
    assert bearer(text).get("/api/v1/me/").status_code == 401
    user.is_active = True
    user.save(update_fields=["is_active"])
    assert bearer(text).get("/api/v1/me/").status_code == 200
    account_deactivate(actor=world.users["platform"], user=user, reason="left")
    user.is_active = True  # even reactivated, the deactivation revoked the token
    user.save(update_fields=["is_active"])
    assert bearer(text).get("/api/v1/me/").status_code == 401


def test_the_password_endpoint_issues_an_expiring_write_token_for_both_schemes(world: World) -> None:
    response = APIClient().post("/api/v1/auth/token/", {"username": "nlp_member", "password": "pw-nlp_member"}, format="json")
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    body = response.json()
    assert set(body) == {"token", "expires_at", "scope"} and body["scope"] == "write"
    expiry = datetime.datetime.fromisoformat(body["expires_at"])
    assert abs(expiry - (timezone.now() + datetime.timedelta(days=90))) < datetime.timedelta(minutes=1)
    for scheme in ("Token", "Bearer"):
        assert bearer(body["token"], scheme).get("/api/v1/me/").json()["username"] == "nlp_member"
    row = PersonalAccessToken.objects.get(user=world.users["nlp_member"])
    assert row.name.startswith("password sign-in ") and row.scope == "write"
    event = AuditEvent.objects.get(action="access_token.created")
    assert event.details == {"via": "password"} and body["token"] not in str(event.after)
    assert len(world.client("nlp_member").get(TOKENS).json()["results"]) == 1  # listed, and revocable


def test_a_key_of_the_old_kind_is_refused_with_a_401_that_says_how_to_get_a_new_one(world: World) -> None:
    for scheme in ("Token", "Bearer"):
        response = bearer("0123456789abcdef0123456789abcdef01234567", scheme).get("/api/v1/me/")
        assert response.status_code == 401
        message = response.json()["error"]["message"]
        assert "old kind" in message and "Sign in again" in message and "personal access token" in message


GARBAGE = [
    "Bearer", "Bearer ", "Token", "Token ", "Bearer gpp_", "Token gpp_", "Bearer gpp_short",
    "Bearer gpp_" + "a" * 55 + "!", "Bearer gpp_" + "a" * 55, "Token gpp_" + "é" * 55, "Bearer gpp_" + "a" * 10_000,
    "Bearer not-a-portal-token", "Bearer a.b.c", "Basic dXNlcjpwYXNz", "Token not-a-key", "gpp_" + "a" * 55,
    "Bearer gpp_" + "a" * 54 + "\u2028", "Token \x7f\x7f", "Bearer  gpp_" + "b" * 55, "Negotiate xyz",
]


@pytest.mark.parametrize("header", GARBAGE)
def test_garbage_authorization_headers_are_401_never_500(world: World, header: str) -> None:
    client = Client()
    response = client.get("/api/v1/me/", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401, (header, response.content[:300])
    assert response.json()["error"]["code"] in ("not_authenticated", "authentication_failed")
    post = client.post(TOKENS, {"name": "x"}, content_type="application/json", HTTP_AUTHORIZATION=header)
    assert post.status_code == 401


def test_a_token_made_by_the_service_is_shown_only_once(world: World) -> None:
    issued = access_token_create(actor=world.users["vision_member"], name="ci", scope="read")
    assert issued.key.startswith(issued.token.prefix)
    row = world.client("vision_member").get(f"{TOKENS}{issued.token.pk}/").json()
    assert issued.key not in str(row)


def test_a_token_in_a_log_line_is_redacted_keeping_its_prefix(world: World) -> None:
    from kernel.logs.redaction import redact_text

    issued = access_token_create(actor=world.users["nlp_member"], name="ci", scope="read")
    secret = issued.key[len(issued.token.prefix):]
    for line in (f"pasted {issued.key} by mistake", f"Authorization: Bearer {issued.key}", f"Token {issued.key}",
                 f'{{"header": "Bearer {issued.key}"}}'):
        redacted = redact_text(line)
        assert secret not in redacted and "[redacted]" in redacted, line
    assert redact_text(f"pasted {issued.key}") == f"pasted {issued.token.prefix}[redacted]"


def test_a_platform_admin_revokes_anyones_token_in_the_admin_site_audited(world: World) -> None:
    issued = access_token_create(actor=world.users["nlp_member"], name="leaked", scope="write")
    admin_user = world.users["platform"]
    admin_user.is_staff = True
    admin_user.is_superuser = True
    admin_user.save()
    client = Client()
    client.force_login(admin_user)
    listing = client.get("/admin/tenants/personalaccesstoken/")
    assert listing.status_code == 200 and issued.token.prefix in listing.content.decode()
    assert issued.token.key_hash not in client.get(f"/admin/tenants/personalaccesstoken/{issued.token.pk}/change/").content.decode()
    response = client.post("/admin/tenants/personalaccesstoken/",
                           {"action": "revoke", "_selected_action": [issued.token.pk]}, follow=True)
    assert response.status_code == 200 and "1 token(s) revoked" in response.content.decode()
    event = AuditEvent.objects.get(action="access_token.revoked")
    assert event.actor_username == "platform" and event.details["via"] == "admin" and event.details["owner"] == "nlp_member"
    assert bearer(issued.key).get("/api/v1/me/").status_code == 401

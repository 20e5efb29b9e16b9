"""Login and logout: audited, throttled after repeated failures, cookies as configured."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client
from rest_framework.test import APIClient

from audit.models import AuditEvent
from tests.conftest import World

pytestmark = pytest.mark.django_db

MAX_FAILURES_PER_USERNAME = settings.GPUPORTAL_SIGNIN_FAILURES_PER_USERNAME
LOCK_SECONDS = settings.GPUPORTAL_SIGNIN_LOCK_SECONDS


def attempt(client: Client, username: str, password: str) -> int:
    return client.post("/login/", {"username": username, "password": password}).status_code


def test_it_logs_in_and_out_and_audits_both_outcomes(world: World) -> None:
    client = Client()
    assert attempt(client, "nlp_member", "wrong") == 200
    response = client.post("/login/", {"username": "nlp_member", "password": "pw-nlp_member"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200
    failed = AuditEvent.objects.filter(action="auth.login_failed").order_by("-pk").first()
    assert failed is not None and failed.details["username"] == "nlp_member" and failed.outcome == "denied"
    assert "wrong" not in failed.record
    assert AuditEvent.objects.filter(action="auth.login", actor_username="nlp_member").exists()
    assert client.post("/logout/").status_code == 302
    assert client.get("/").status_code == 302


def test_it_throttles_a_username_after_repeated_failures(world: World) -> None:
    client = Client()
    for _ in range(MAX_FAILURES_PER_USERNAME):
        assert attempt(client, "nlp_member", "wrong") == 200
    # Even the right password is refused now, without being checked.
    response = client.post("/login/", {"username": "nlp_member", "password": "pw-nlp_member"})
    assert response.status_code == 429
    assert "Too many failed attempts" in response.content.decode()
    assert client.get("/").status_code == 302
    throttled = AuditEvent.objects.filter(action="auth.login_failed").order_by("-pk").first()
    assert throttled is not None and throttled.details["reason"] == "throttled"
    # Other people can still log in from elsewhere.
    assert attempt(Client(REMOTE_ADDR="10.0.0.9"), "nlp_admin", "pw-nlp_admin") == 302


def test_it_counts_usernames_case_insensitively(world: World) -> None:
    client = Client()
    for index in range(MAX_FAILURES_PER_USERNAME):
        attempt(client, "NLP_member" if index % 2 else "nlp_member", "wrong")
    assert attempt(client, "nlp_member", "pw-nlp_member") == 429


def test_it_forgets_the_failures_of_a_username_after_a_success(world: World) -> None:
    client = Client()
    for _ in range(MAX_FAILURES_PER_USERNAME - 1):
        attempt(client, "nlp_member", "wrong")
    assert attempt(client, "nlp_member", "pw-nlp_member") == 302
    client.post("/logout/")
    for _ in range(MAX_FAILURES_PER_USERNAME - 1):
        attempt(client, "nlp_member", "wrong")
    assert attempt(client, "nlp_member", "pw-nlp_member") == 302


def test_the_api_token_endpoint_counts_failures_with_the_portal(world: World) -> None:
    api = APIClient()
    for _ in range(MAX_FAILURES_PER_USERNAME - 1):
        assert api.post("/api/v1/auth/token/", {"username": "nlp_member", "password": "wrong"}, format="json").status_code == 401
    assert attempt(Client(), "nlp_member", "wrong") == 200
    response = api.post("/api/v1/auth/token/", {"username": "nlp_member", "password": "pw-nlp_member"}, format="json")
    assert response.status_code == 429 and response.json()["error"]["code"] == "throttled"
    assert 0 < int(response["Retry-After"]) <= LOCK_SECONDS
    throttled = AuditEvent.objects.filter(action="auth.login_failed").order_by("-pk").first()
    assert throttled is not None and throttled.outcome == "denied"
    assert throttled.details == {"username": "nlp_member", "via": "api_token", "reason": "throttled"}
    assert not AuditEvent.objects.filter(action="auth.token_issued").exists()
    assert attempt(Client(), "nlp_member", "pw-nlp_member") == 429


def test_it_keeps_the_session_cookie_from_scripts(world: World) -> None:
    client = Client()
    client.post("/login/", {"username": "nlp_member", "password": "pw-nlp_member"})
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "Lax"


def test_it_puts_no_secret_in_a_page(world: World) -> None:
    client = Client()
    client.force_login(world.users["platform"])
    for url in ["/", "/platform/clusters/", f"/platform/clusters/{world.cluster.pk}/", "/platform/catalogue/", "/audit/"]:
        html = client.get(url).content.decode()
        assert settings.SECRET_KEY not in html, url
        assert "pw-" not in html, url

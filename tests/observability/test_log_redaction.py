"""Secrets never reach the logs: tokens, passwords and kubeconfig credentials are redacted from
messages, extra fields and tracebacks, and signing in or calling the API with a token leaves none
of them in the output."""

from __future__ import annotations

import base64
import logging
import time
from typing import Any

import pytest
from django.test import Client

from kernel.logs.redaction import redact_text, redact_value
from tenants.access_tokens import access_token_create
from tests.conftest import World
from tests.observability.log_capture import Captured, console_logs, json_logs

__all__ = ["console_logs", "json_logs"]  # the fixtures

KUBECONFIG = """apiVersion: v1
kind: Config
users:
- name: portal
  user:
    token: eyJhbGciOiJSUzI1NiIsImtpZCI6IlNlY3JldFRva2VuIn0.payload.sig
    client-key-data: LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tU0VDUkVU
"""
PEM = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIHNlY3JldC1lZDI1NTE5LWtleQ==\n-----END PRIVATE KEY-----"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("GET /api/v1/usage/?department=3&token=s3cr3t-query-token&x=1", "s3cr3t-query-token"),
        ("Authorization: Token 0123456789abcdef0123456789abcdef01234567", "0123456789abcdef"),
        ("sent header authorization=Bearer gpn_live_node_token_value", "gpn_live_node_token_value"),
        ("retrying with Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "eyJhbGciOiJIUzI1NiJ9"),
        ('{"username": "alice", "password": "correct horse battery"}', "correct horse"),
        ("{'username': 'alice', 'password': 'hunter2'}", "hunter2"),
        ("could not connect to postgres://gpuportal_app:db-pass-77@postgres:5432/gpuportal", "db-pass-77"),
        ("GPUPORTAL_SECRET_KEY=django-insecure-abcdef", "django-insecure-abcdef"),
        ("csrfmiddlewaretoken=Zx9Zx9Zx9&next=/", "Zx9Zx9Zx9"),
        (KUBECONFIG, "eyJhbGciOiJSUzI1NiIsImtpZCI6IlNlY3JldFRva2VuIn0"),
        (KUBECONFIG, "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tU0VDUkVU"),
        (f"loaded key\n{PEM}\n", "MC4CAQAwBQYDK2VwBCIEIHNlY3JldC1lZDI1NTE5LWtleQ"),
    ],
)
def test_a_secret_in_a_text_is_redacted_and_the_rest_kept(text: str, secret: str) -> None:
    redacted = redact_text(text)
    assert secret not in redacted and "[redacted" in redacted


def test_ordinary_text_is_left_alone_and_redaction_is_idempotent() -> None:
    for text in ("GET /api/v1/auth/token/ 200 (3.1 ms)", "Token authentication failed for alice", "tokens issued: 4"):
        assert redact_text(text) == text
    once = redact_text("token=abc&password=def")
    assert once == "token=[redacted]&password=[redacted]" and redact_text(once) == once


def test_a_long_run_of_word_characters_is_scanned_in_linear_time() -> None:
    """A 64 KB base64 blob (a certificate in a kubeconfig) took minutes with unbounded key patterns."""
    blob = base64.b64encode(bytes(range(256)) * 192).decode()
    started = time.perf_counter()
    for text in (f"certificate-authority-data: {blob}", blob, "a." * 32768, f"https://{blob}"):
        assert redact_text(text) == text
    assert time.perf_counter() - started < 5  # about 0.1 s; the quadratic patterns needed minutes


def test_fields_are_redacted_by_key_at_any_depth_and_by_content() -> None:
    value = {"cluster": "lab", "kubeconfig": KUBECONFIG, "auth": {"api_key": "k-1", "note": "password=p-2"}, "n": 3}
    assert redact_value(value) == {
        "cluster": "lab", "kubeconfig": "[redacted]", "auth": {"api_key": "[redacted]", "note": "password=[redacted]"},
        "n": 3,
    }


def test_both_formats_redact_messages_extras_and_tracebacks(json_logs: Captured, console_logs: Captured) -> None:
    log = logging.getLogger("gpuportal.test")
    log.warning("applying kubeconfig %s", KUBECONFIG, extra={"token": "tok-extra-1", "headers": {"Authorization": "Basic dXNlcjpwYXNzd29yZA=="}})
    try:
        raise ValueError("refused: password=tb-secret-9")
    except ValueError:
        log.exception("sign-in failed")
    for output in (json_logs.text, console_logs.text):
        for secret in ("eyJhbGciOiJSUzI1NiIsImtpZCI6", "tok-extra-1", "dXNlcjpwYXNzd29yZA", "tb-secret-9"):
            assert secret not in output
    first, second = json_logs.of("gpuportal.test")
    assert first["token"] == "[redacted]" and first["headers"] == {"Authorization": "[redacted]"}
    assert "password=[redacted]" in second["exc_info"]


@pytest.mark.django_db
def test_a_token_call_and_a_password_sign_in_leave_no_secret_in_the_output(
    world: World, json_logs: Captured, settings: Any
) -> None:
    password = "pw-nlp_member"
    token = access_token_create(actor=world.users["nlp_member"], name="redaction", scope="read").key
    settings.GPUPORTAL_METRICS_TOKEN = "scrape-bearer-secret-0123456789"
    api = Client()
    assert api.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-bearer-secret-0123456789").status_code == 200
    assert api.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong-bearer-secret-9876543210").status_code == 403
    assert api.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 200
    assert api.get("/api/v1/me/?token=" + token, HTTP_AUTHORIZATION="Bearer not-a-valid-token-but-secret").status_code == 401
    obtained = api.post("/api/v1/auth/token/", {"username": "nlp_member", "password": password}, content_type="application/json")
    assert obtained.status_code == 200
    wrong = api.post("/api/v1/auth/token/", {"username": "nlp_member", "password": "wrong-" + password},
                     content_type="application/json")
    assert wrong.status_code in (400, 401)
    browser = Client()
    assert browser.post("/login/", {"username": "nlp_member", "password": password}).status_code == 302
    refused = Client().post("/login/?next=/&token=" + token, {"username": "nobody", "password": "bad-" + password})
    assert refused.status_code == 200
    output = json_logs.text
    assert json_logs.of("gpuportal.access")  # the requests were written
    for secret in (password, token, obtained.json()["token"], "not-a-valid-token-but-secret", "bearer-secret"):
        assert secret not in output

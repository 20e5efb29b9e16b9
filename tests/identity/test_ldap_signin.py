"""LDAP sign-in against a real slapd: StartTLS, the lockout, nested groups mapped to roles by DN,
accounts linked by DN, and a local account never taken over."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from audit.models import AuditEvent
from tenants.models import ExternalGroupMapping, ExternalIdentity, Membership, Role
from tests.conftest import World
from tests.identity.conftest import LDAP_BACKEND
from tests.identity.ldap_server import (
    NLP_ADMINS,
    NLP_RESEARCHERS,
    PASSWORDS,
    PEOPLE,
    VISION,
    directory_start,
    portal_settings,
    skip_without_ldap,
)

pytestmark = pytest.mark.django_db


def _sign_in(username: str, password: str) -> tuple[Client, int]:
    browser = Client()
    response = browser.post(reverse("login"), {"username": username, "password": password})
    return browser, response.status_code


def _roles(user: User) -> set[tuple[str, str, str]]:
    return {(m.department.slug, m.role, m.source) for m in Membership.objects.filter(user=user)}


def test_a_directory_user_signs_in_over_starttls_and_gets_the_roles_of_nested_groups_by_dn(
    world: World, directory_signin: Any
) -> None:
    ExternalGroupMapping.objects.create(source="ldap", external_group=NLP_ADMINS, department=world.nlp,
                                        role=Role.DEPARTMENT_ADMIN)
    # Written with other spacing and case than the directory returns: DNs compare as the directory does.
    ExternalGroupMapping.objects.create(source="ldap", external_group=NLP_RESEARCHERS.upper().replace(",", ", "),
                                        department=world.nlp, role=Role.RESEARCHER)
    ExternalGroupMapping.objects.create(source="ldap", external_group=VISION, department=world.vision,
                                        role=Role.RESEARCHER)
    ExternalGroupMapping.objects.create(source="oidc", external_group=NLP_ADMINS, department=world.vision,
                                        role=Role.AUDITOR)  # another source: ignored

    # The server refuses simple binds on a connection without TLS: signing in proves StartTLS ran.
    browser, status = _sign_in("alice", PASSWORDS["alice"])
    assert status == 302
    assert browser.get(reverse("home")).status_code == 200

    alice = User.objects.get(username="alice")
    assert (alice.first_name, alice.last_name, alice.email) == ("Alice", "Liddell", "alice@example.org")
    assert not alice.has_usable_password()
    identity = ExternalIdentity.objects.get(user=alice)
    assert (identity.source, identity.issuer, identity.subject) == (
        "ldap", directory_signin.ldap_uri.rstrip("/"), f"uid=alice,{PEOPLE}",
    )
    assert identity.last_login_at is not None
    # Directly in gpu-nlp-admins, and through it (nested) in gpu-nlp-researchers; not in gpu-vision.
    assert _roles(alice) == {("nlp", Role.DEPARTMENT_ADMIN, "ldap"), ("nlp", Role.RESEARCHER, "ldap")}
    codes = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"ldap.account_linked", "membership.granted", "auth.login"} <= codes


def test_plain_ldap_is_refused_by_a_directory_that_requires_tls(settings: Any, world: World,
                                                                  directory_signin: Any) -> None:
    """The counter-proof of the test above: the same sign-in without StartTLS fails."""
    settings.GPUPORTAL_LDAP_START_TLS = False
    settings.GPUPORTAL_LDAP_ALLOW_PLAIN = True
    _, status = _sign_in("alice", PASSWORDS["alice"])
    assert status == 200  # the form again, with its error
    assert not User.objects.filter(username="alice").exists()


def test_starttls_against_a_directory_without_tls_fails_closed(settings: Any, world: World) -> None:
    skip_without_ldap()
    server = directory_start(tls=False)
    try:
        for name, value in portal_settings(server).items():
            setattr(settings, name, value)
        settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, LDAP_BACKEND]
        cache.clear()
        _, status = _sign_in("alice", PASSWORDS["alice"])
        assert status == 200
        assert not User.objects.filter(username="alice").exists()
    finally:
        server.stop()


def test_a_wrong_directory_password_is_refused_and_counts_towards_the_lockout(
    settings: Any, world: World, directory_signin: Any
) -> None:
    settings.GPUPORTAL_SIGNIN_FAILURES_PER_USERNAME = 3
    for _ in range(3):
        _, status = _sign_in("carol", "not-her-password")
        assert status == 200
    assert not User.objects.filter(username="carol").exists()
    assert AuditEvent.objects.filter(action="auth.locked_out").count() == 1
    # Locked: even the right password is refused now, without asking the directory.
    _, status = _sign_in("carol", PASSWORDS["carol"])
    assert status == 429
    assert not User.objects.filter(username="carol").exists()
    api = APIClient().post("/api/v1/auth/token/", {"username": "carol", "password": PASSWORDS["carol"]}, format="json")
    assert api.status_code == 429


def test_a_directory_user_gets_an_api_token_with_the_directory_password(world: World, directory_signin: Any) -> None:
    api = APIClient()
    response = api.post("/api/v1/auth/token/", {"username": "bob", "password": PASSWORDS["bob"]}, format="json")
    assert response.status_code == 200, response.content
    api.credentials(HTTP_AUTHORIZATION=f"Token {response.json()['token']}")
    assert api.get("/api/v1/me/").json()["username"] == "bob"


def test_a_local_account_with_the_directory_username_is_not_taken_over(world: World, directory_signin: Any) -> None:
    local = User.objects.create_user("bob", password="the-local-bob-password")
    _, status = _sign_in("bob", PASSWORDS["bob"])
    assert status == 200  # refused
    assert not ExternalIdentity.objects.exists()
    refused = AuditEvent.objects.get(action="ldap.link_refused")
    assert refused.details["username"] == "bob" and refused.details["dn"] == f"uid=bob,{PEOPLE}"
    # The local account keeps working with its own password.
    browser, status = _sign_in("bob", "the-local-bob-password")
    assert status == 302
    assert browser.get(reverse("home")).wsgi_request.user == local


def test_a_manual_grant_survives_a_directory_sign_in(world: World, directory_signin: Any) -> None:
    ExternalGroupMapping.objects.create(source="ldap", external_group=VISION, department=world.vision,
                                        role=Role.RESEARCHER)
    _sign_in("bob", PASSWORDS["bob"])
    bob = User.objects.get(username="bob")
    Membership.objects.create(user=bob, department=world.nlp, role=Role.RESEARCHER)  # manual
    Membership.objects.filter(user=bob, source="ldap").delete()
    _sign_in("bob", PASSWORDS["bob"])
    assert _roles(bob) == {("nlp", Role.RESEARCHER, "manual"), ("vision", Role.RESEARCHER, "ldap")}

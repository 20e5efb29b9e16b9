"""A subject's first OIDC sign-in racing another: two callbacks at once for a new subject, or a
username taken between ``username_for``'s check and the insert. The competing row is written from
inside ``username_for`` (after its check), so the race is the same on every run."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from audit.models import AuditEvent
from tenants.models import ExternalIdentity
from tenants.oidc.accounts import oidc_signin
from tenants.oidc.claims import username_for
from tests.conftest import World
from tests.identity.oidc_support import MockProvider, mock_provider_fixture, sso_login  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db

ISSUER = "https://sso.example.org/realms/campus"
CLAIMS = {"sub": "ada-sub", "preferred_username": "ada", "email": "ada@example.org"}


def _events(code: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=code).order_by("seq"))


@pytest.mark.parametrize("winner_name", ["ada", "ada-elsewhere"], ids=["same-username", "other-username"])
def test_two_first_sign_ins_of_one_subject_end_on_the_account_the_first_one_created(
    world: World, monkeypatch: pytest.MonkeyPatch, winner_name: str,
) -> None:
    """The other callback commits its account and identity after this one found no identity: this
    one's insert fails (on the username or on the (issuer, subject) pair) and it signs in as the winner."""

    def other_callback_commits_first(claims: dict[str, Any]) -> str:
        name = username_for(claims)
        winner = User.objects.create(username=winner_name, email="ada@example.org")
        ExternalIdentity.objects.create(user=winner, source="oidc", issuer=ISSUER, subject="ada-sub")
        return name

    monkeypatch.setattr("tenants.oidc.accounts.username_for", other_callback_commits_first)
    user = oidc_signin(issuer=ISSUER, claims=CLAIMS, groups_claim="groups")

    assert user.username == winner_name
    assert list(ExternalIdentity.objects.filter(subject="ada-sub").values_list("user_id", flat=True)) == [user.pk]
    assert not User.objects.filter(username__startswith="ada").exclude(pk=user.pk).exists()
    assert _events("account.provisioned_oidc") == []  # this callback provisioned nothing
    login = _events("auth.login")[-1]
    assert login.actor_id == user.pk and login.details["subject"] == "ada-sub"
    assert ExternalIdentity.objects.get(subject="ada-sub").last_login_at is not None


def test_a_username_taken_between_the_check_and_the_insert_gets_the_next_free_name(
    world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    def another_account_takes_the_name(claims: dict[str, Any]) -> str:
        name = username_for(claims)
        if not calls:
            User.objects.create_user(name, password="pw-of-someone-else")
        calls.append(name)
        return name

    monkeypatch.setattr("tenants.oidc.accounts.username_for", another_account_takes_the_name)
    user = oidc_signin(issuer=ISSUER, claims=CLAIMS, groups_claim="groups")

    assert calls == ["ada", "ada-2"]
    assert user.username == "ada-2" and not user.has_usable_password()
    assert ExternalIdentity.objects.get(issuer=ISSUER, subject="ada-sub").user == user
    assert [e.target_id for e in _events("account.provisioned_oidc")] == [str(user.pk)]


def test_a_new_account_that_keeps_colliding_is_an_audited_refusal_not_a_500(
    world: World, mock_provider: MockProvider, monkeypatch: pytest.MonkeyPatch,
) -> None:

    def always_taken(claims: dict[str, Any]) -> str:
        name = username_for(claims)
        User.objects.create_user(name, password="pw-of-someone-else")
        return name

    monkeypatch.setattr("tenants.oidc.accounts.username_for", always_taken)
    mock_provider.user_set("eve-sub", {"preferred_username": "eve"})
    client = Client()
    walk = sso_login(client, sub="eve-sub")

    assert walk.callback.status_code == 302 and walk.callback["Location"] == "/login/"
    assert "_auth_user_id" not in client.session
    assert not ExternalIdentity.objects.filter(subject="eve-sub").exists()
    assert _events("auth.login_failed")[-1].details["reason"].startswith("account:")

"""The directory sync against a real slapd: a departed user loses sessions and tokens, roles follow
the groups, and no error, empty answer or mass departure deactivates anyone by mistake."""

from __future__ import annotations

import io
import itertools
import json
import socket
from typing import Any

import pytest
from django.contrib.auth import authenticate
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from audit.models import AuditEvent
from tenants.models import ExternalGroupMapping, Membership, Role
from tenants.tasks import DirectorySyncFailed, ldap_sync_task
from tests.conftest import World
from tests.identity.ldap_server import GROUPS, NLP_ADMINS, NLP_RESEARCHERS, member_set, person_add

pytestmark = pytest.mark.django_db

_numbers = itertools.count()


def ldap_directory_sync(**options: Any) -> Any:
    """The sync, imported when called: python-ldap may be missing, and then the tests skip."""
    from tenants.ldap.sync import ldap_directory_sync as sync

    return sync(**options)


def _linked(directory: Any, *groups: str) -> tuple[User, str, str]:
    """A new directory person who signed in once (so the portal links them); user, DN, password."""
    uid = f"sync{next(_numbers)}"
    password = f"{uid}-directory-pw"
    dn = person_add(directory, uid, password, *groups)
    user = authenticate(None, username=uid, password=password)
    assert isinstance(user, User)
    return user, dn, password


def test_a_user_deleted_from_the_directory_is_deactivated_and_loses_sessions_and_tokens(
    world: World, directory_signin: Any
) -> None:
    _linked(directory_signin)  # someone who stays
    user, dn, password = _linked(directory_signin)
    browser = Client()
    assert browser.post(reverse("login"), {"username": user.username, "password": password}).status_code == 302
    token = APIClient().post("/api/v1/auth/token/", {"username": user.username, "password": password}, format="json")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token.json()['token']}")
    assert api.get("/api/v1/me/").status_code == 200
    assert browser.get(reverse("home")).status_code == 200

    directory_signin.ldapdelete(dn)
    result = ldap_sync_task.apply().get()

    assert result["deactivated"] == [user.username]
    user.refresh_from_db()
    assert not user.is_active
    assert api.get("/api/v1/me/").status_code == 401
    assert browser.get(reverse("home")).status_code == 302  # signed out: to the login page
    event = AuditEvent.objects.get(action="account.deactivated")
    assert event.details["reason"] == "gone from the LDAP directory"
    assert event.details["sessions_ended_count"] == 1 and event.details["tokens_revoked_count"] == 1
    # Gone is gone: the next sync changes nothing, and the directory password no longer signs in.
    assert ldap_sync_task.apply().get()["deactivated"] == []
    assert authenticate(None, username=user.username, password=password) is None


def test_the_sync_recomputes_ldap_roles_from_the_groups_and_keeps_manual_ones(
    world: World, directory_signin: Any
) -> None:
    ExternalGroupMapping.objects.create(source="ldap", external_group=NLP_ADMINS, department=world.nlp,
                                        role=Role.DEPARTMENT_ADMIN)
    ExternalGroupMapping.objects.create(source="ldap", external_group=NLP_RESEARCHERS, department=world.nlp,
                                        role=Role.RESEARCHER)
    user, dn, _ = _linked(directory_signin, NLP_ADMINS)
    Membership.objects.create(user=user, department=world.vision, role=Role.RESEARCHER)  # manual
    assert Membership.objects.filter(user=user, source="ldap").count() == 2  # nested: admins ⊂ researchers

    member_set(directory_signin, NLP_ADMINS, dn, present=False)
    report = ldap_directory_sync()

    assert report.outcome == "ok" and report.roles_changed == 2 and report.deactivated == []
    assert {(m.department.slug, m.role, m.source) for m in Membership.objects.filter(user=user)} == {
        ("vision", Role.RESEARCHER, "manual"),
    }
    revoked = AuditEvent.objects.filter(action="membership.revoked")
    assert [event.details["source"] for event in revoked] == ["ldap", "ldap"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_directory_deactivates_nobody(settings: Any, world: World, directory_signin: Any) -> None:
    users = [_linked(directory_signin)[0] for _ in range(2)]
    settings.GPUPORTAL_LDAP_SERVER_URI = f"ldap://127.0.0.1:{_free_port()}"  # nothing listens there
    settings.GPUPORTAL_LDAP_ISSUER = directory_signin.ldap_uri.rstrip("/")  # the same directory, moved

    report = ldap_directory_sync()
    assert report.outcome == "unreachable" and report.checked == 2
    with pytest.raises(DirectorySyncFailed):
        ldap_sync_task.apply().get()
    assert all(User.objects.get(pk=user.pk).is_active for user in users)
    assert not AuditEvent.objects.filter(action="account.deactivated").exists()


def test_a_user_search_that_finds_nobody_deactivates_nobody(settings: Any, world: World, directory_signin: Any) -> None:
    user, _, _ = _linked(directory_signin)
    settings.GPUPORTAL_LDAP_USER_SEARCH_BASE = GROUPS  # a wrong base: no person under it
    settings.GPUPORTAL_LDAP_DISABLED_FILTER = "(objectClass=inetOrgPerson)"  # would match everyone
    report = ldap_directory_sync()
    assert report.outcome == "empty"
    assert User.objects.get(pk=user.pk).is_active


def test_a_sync_past_the_safety_threshold_deactivates_nobody_until_forced(
    settings: Any, world: World, directory_signin: Any
) -> None:
    settings.GPUPORTAL_LDAP_SYNC_MAX_DEACTIVATIONS = 1
    settings.GPUPORTAL_LDAP_SYNC_MAX_DEACTIVATION_PERCENT = 10
    linked = [_linked(directory_signin) for _ in range(4)]
    for _, dn, _ in linked[:2]:
        directory_signin.ldapdelete(dn)

    with pytest.raises(CommandError, match="halted"):
        call_command("ldap_sync")
    assert User.objects.filter(pk__in=[user.pk for user, _, _ in linked], is_active=True).count() == 4
    halted = AuditEvent.objects.get(action="ldap.sync_halted")
    assert halted.details["would_deactivate_count"] == 2 and halted.details["limit"] == 1

    printed = io.StringIO()
    call_command("ldap_sync", "--dry-run", "--force", stdout=printed)
    assert json.loads(printed.getvalue())["to_deactivate"] == [user.username for user, _, _ in linked[:2]]
    assert User.objects.filter(pk__in=[user.pk for user, _, _ in linked], is_active=True).count() == 4

    call_command("ldap_sync", "--force")
    assert {user.username for user in User.objects.filter(is_active=False)} == {user.username for user, _, _ in linked[:2]}


def test_an_entry_matched_by_the_disabled_filter_is_deactivated(settings: Any, world: World,
                                                                 directory_signin: Any) -> None:
    settings.GPUPORTAL_LDAP_DISABLED_FILTER = "(employeeType=disabled)"
    kept, _, _ = _linked(directory_signin)
    user, dn, _ = _linked(directory_signin)
    directory_signin.ldapmodify(f"dn: {dn}\nchangetype: modify\nadd: employeeType\nemployeeType: disabled\n")
    report = ldap_directory_sync()
    assert report.deactivated == [user.username]
    assert User.objects.get(pk=kept.pk).is_active
    assert AuditEvent.objects.get(action="account.deactivated").details["reason"] == "disabled in the LDAP directory"


def test_the_sync_command_refuses_without_ldap_configured(world: World) -> None:
    with pytest.raises(CommandError, match="not configured"):
        call_command("ldap_sync")

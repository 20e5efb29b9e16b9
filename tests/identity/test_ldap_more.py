"""LDAP: posix groups, linking a local account on purpose, and the embedded clock running the sync."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import authenticate
from django.contrib.auth.models import User
from django.core.management import call_command

from audit.models import AuditEvent
from gpuportal.clock import Clock
from tenants.models import ExternalGroupMapping, ExternalIdentity, Membership, Role
from tenants.tasks import ldap_sync_task
from tests.conftest import World
from tests.identity.ldap_server import PASSWORDS, PEOPLE, person_add, posix_group_add

pytestmark = pytest.mark.django_db


def test_posix_groups_map_to_roles_by_dn(settings: Any, world: World, directory_signin: Any) -> None:
    group = posix_group_add(directory_signin, "gpu-posix-vision", 5001, "carol")
    settings.GPUPORTAL_LDAP_GROUP_TYPE = "posixGroup"
    ExternalGroupMapping.objects.create(source="ldap", external_group=group, department=world.vision,
                                        role=Role.RESEARCHER)
    carol = authenticate(None, username="carol", password=PASSWORDS["carol"])
    assert isinstance(carol, User)
    assert {(m.department.slug, m.role, m.source) for m in Membership.objects.filter(user=carol)} == {
        ("vision", Role.RESEARCHER, "ldap"),
    }


def test_an_operator_links_a_local_account_to_its_entry_and_the_directory_password_then_signs_it_in(
    world: World, directory_signin: Any
) -> None:
    person_add(directory_signin, "linda", "linda-directory-pw")
    local = User.objects.create_user("linda", password="linda-local-pw")
    assert authenticate(None, username="linda", password="linda-directory-pw") is None  # refused: not linked

    call_command("ldap_sync", "--link", "linda")

    assert ExternalIdentity.objects.get(user=local).subject == f"uid=linda,{PEOPLE}"
    assert authenticate(None, username="linda", password="linda-directory-pw") == local
    assert AuditEvent.objects.filter(action="ldap.account_linked").count() == 1


def test_the_embedded_clock_runs_the_directory_sync_when_ldap_is_configured(world: World, directory_signin: Any) -> None:
    dn = person_add(directory_signin, "leaver", "leaver-directory-pw")
    leaver = authenticate(None, username="leaver", password="leaver-directory-pw")
    assert isinstance(leaver, User)
    directory_signin.ldapdelete(dn)
    assert "tenants-ldap-sync" in Clock().run_due()
    leaver.refresh_from_db()
    assert not leaver.is_active


def test_the_sync_task_does_nothing_without_ldap(world: World) -> None:
    assert ldap_sync_task.apply().get() == {"outcome": "not configured"}


def test_two_first_sign_ins_of_one_entry_at_once_end_on_one_account(
    world: World, directory_signin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other sign-in creates the account between this one's lookup and its insert (played here
    deterministically): this one then uses that account instead of failing with a 500."""
    from tenants.ldap import backend
    from tenants.ldap.accounts import ldap_account_create as create

    def raced(**kwargs: Any) -> User:
        create(**kwargs)  # the other sign-in, committed first
        return create(**kwargs)  # this one: the username (and the entry) are taken now

    monkeypatch.setattr(backend, "ldap_account_create", raced)
    user = authenticate(username="alice", password=PASSWORDS["alice"])
    assert user is not None and user.username == "alice"
    assert User.objects.filter(username="alice").count() == 1
    assert ExternalIdentity.objects.filter(user=user, source="ldap").count() == 1

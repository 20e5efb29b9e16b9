"""Roles from an identity provider: recomputed per source, manual grants untouched, every change
audited; a deactivated account loses its sessions and tokens at once."""

from __future__ import annotations

import datetime

import pytest
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

from audit.models import AuditEvent
from tenants.identity import account_deactivate, external_roles_sync
from tenants.models import ExternalGroupMapping, Membership, PersonalAccessToken, Role
from tests.conftest import World

pytestmark = pytest.mark.django_db


def _map(world: World, group: str, role: str, department_slug: str = "nlp", source: str = "oidc") -> None:
    department = {"nlp": world.nlp, "vision": world.vision}[department_slug]
    ExternalGroupMapping.objects.create(source=source, external_group=group, department=department, role=role)


def _roles(user_id: int) -> set[tuple[str, str, str]]:
    return {(m.department.slug, m.role, m.source) for m in Membership.objects.filter(user_id=user_id)}


def test_groups_grant_mapped_roles_and_a_later_login_without_the_group_revokes_them(world: World) -> None:
    user = world.users["nobody"]
    _map(world, "/gpu/nlp-admins", Role.DEPARTMENT_ADMIN)
    _map(world, "/gpu/vision", Role.RESEARCHER, "vision")
    changes = external_roles_sync(user=user, source="oidc", groups=["/gpu/nlp-admins", "/gpu/vision", "/unmapped"])
    assert {(c.role, c.granted) for c in changes} == {(Role.DEPARTMENT_ADMIN, True), (Role.RESEARCHER, True)}
    assert _roles(user.pk) == {("nlp", Role.DEPARTMENT_ADMIN, "oidc"), ("vision", Role.RESEARCHER, "oidc")}

    assert external_roles_sync(user=user, source="oidc", groups=["/gpu/nlp-admins", "/gpu/vision"]) == []
    external_roles_sync(user=user, source="oidc", groups=["/gpu/vision"])
    assert _roles(user.pk) == {("vision", Role.RESEARCHER, "oidc")}
    codes = list(AuditEvent.objects.filter(actor_username="nobody").values_list("action", flat=True))
    assert codes.count("membership.granted") == 2 and codes.count("membership.revoked") == 1


def test_a_manual_grant_survives_logins_that_do_not_carry_it(world: World) -> None:
    member = world.users["nlp_member"]  # a manual researcher in nlp
    _map(world, "/gpu/nlp", Role.RESEARCHER)
    external_roles_sync(user=member, source="oidc", groups=["/gpu/nlp"])
    assert _roles(member.pk) == {("nlp", Role.RESEARCHER, "manual")}  # not duplicated
    external_roles_sync(user=member, source="oidc", groups=[])
    assert _roles(member.pk) == {("nlp", Role.RESEARCHER, "manual")}  # not removed


def test_sources_do_not_touch_each_others_roles(world: World) -> None:
    user = world.users["nobody"]
    _map(world, "cn=nlp,ou=groups", Role.RESEARCHER, source="ldap")
    _map(world, "/gpu/vision", Role.RESEARCHER, "vision")
    external_roles_sync(user=user, source="ldap", groups=["cn=nlp,ou=groups"])
    external_roles_sync(user=user, source="oidc", groups=["/gpu/vision"])
    external_roles_sync(user=user, source="oidc", groups=[])
    assert _roles(user.pk) == {("nlp", Role.RESEARCHER, "ldap")}


def test_deactivation_ends_sessions_and_revokes_every_token(world: World) -> None:
    user = world.users["nlp_member"]
    browser = Client()
    browser.force_login(user)
    other = Client()
    other.force_login(world.users["nlp_admin"])
    PersonalAccessToken.objects.create(
        user=user, name="ci", prefix="gpp_abc", key_hash="0" * 64, expires_at=timezone.now() + datetime.timedelta(days=9)
    )
    account_deactivate(actor=None, user=user, reason="left the directory")
    user.refresh_from_db()
    assert not user.is_active
    assert Session.objects.count() == 1  # only the other user's
    assert PersonalAccessToken.objects.get(user=user).revoked_at is not None
    event = AuditEvent.objects.get(action="account.deactivated")
    assert event.details["sessions_ended_count"] == 1 and event.details["tokens_revoked_count"] == 1


def test_losing_the_last_provider_role_in_a_department_takes_the_user_off_its_projects_audited(world: World) -> None:
    user = world.users["nobody"]
    _map(world, "/gpu/nlp", Role.RESEARCHER)
    _map(world, "/gpu/nlp-admins", Role.DEPARTMENT_ADMIN)
    _map(world, "/gpu/vision", Role.RESEARCHER, "vision")
    external_roles_sync(user=user, source="oidc", groups=["/gpu/nlp", "/gpu/nlp-admins", "/gpu/vision"])
    world.llm.members.add(user)
    world.seg.members.add(user)

    external_roles_sync(user=user, source="oidc", groups=["/gpu/nlp", "/gpu/vision"])  # a role left in nlp
    assert world.llm.members.filter(pk=user.pk).exists()
    assert not AuditEvent.objects.filter(action="project.member_removed").exists()

    external_roles_sync(user=user, source="oidc", groups=["/gpu/vision"])  # nlp's last role goes
    assert not world.llm.members.filter(pk=user.pk).exists()
    assert world.seg.members.filter(pk=user.pk).exists()  # vision's role stays, and its project
    [removed] = AuditEvent.objects.filter(action="project.member_removed")
    assert (removed.target_id, removed.department_id, removed.actor_id) == (str(world.llm.pk), world.nlp.pk, user.pk)
    assert removed.before == {"user": "nobody"}
    assert removed.details == {"why": "no role left in the department", "source": "oidc"}


def test_a_manual_role_left_in_the_department_keeps_the_user_on_its_projects(world: World) -> None:
    member = world.users["nlp_member"]  # a manual researcher in nlp, member of nlp-llm
    _map(world, "/gpu/nlp-admins", Role.DEPARTMENT_ADMIN)
    external_roles_sync(user=member, source="oidc", groups=["/gpu/nlp-admins"])
    external_roles_sync(user=member, source="oidc", groups=[])
    assert world.llm.members.filter(pk=member.pk).exists()
    assert not AuditEvent.objects.filter(action="project.member_removed").exists()

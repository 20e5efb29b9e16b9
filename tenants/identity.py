"""Roles that come from an identity provider, and ending a departed account's access.

Shared by every sign-in source (OIDC, LDAP): a sign-in, or a directory sync, hands the user's
external groups to ``external_roles_sync``, which recomputes only the memberships of that source
from ``ExternalGroupMapping`` and leaves the manually granted ones alone (docs/identity.md).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.db import transaction

from audit import actions
from audit.services import audit_record
from kernel.clock import clock_now
from tenants.access import access_forget
from tenants.models import ExternalGroupMapping, IdentitySource, Membership, MembershipSource, PersonalAccessToken
from tenants.services import project_members_unreadable_remove


@dataclass(frozen=True)
class RoleChange:
    department_id: int
    role: str
    granted: bool


def _wanted_roles(*, source: str, groups: Collection[str]) -> set[tuple[int, str]]:
    if not groups:
        return set()
    rows = ExternalGroupMapping.objects.filter(source=source, external_group__in=list(groups))
    return {(row.department_id, row.role) for row in rows}


@transaction.atomic
def external_roles_sync(*, user: User, source: str, groups: Collection[str]) -> list[RoleChange]:
    """Make the user's memberships of ``source`` exactly what the mapping table gives for ``groups``.

    A role the user already holds manually is neither duplicated nor removed. Each grant and
    revocation is audited (as the user, the provider having vouched for them), with the source.
    A revocation that leaves the user unable to read a project's department takes them off that
    project too, audited ``project.member_removed`` with the source.
    """
    if source not in IdentitySource.values:
        raise ValueError(f"unknown identity source {source!r}")
    # Two sign-ins of one user at once must not both insert the same membership (kernel/locks.py).
    User.objects.select_for_update(no_key=True).filter(pk=user.pk).first()
    wanted = _wanted_roles(source=source, groups=groups)
    held = list(Membership.objects.filter(user=user))
    from_source = {(m.department_id, m.role): m for m in held if m.source == source}
    other = {(m.department_id, m.role) for m in held if m.source != source}
    changes: list[RoleChange] = []
    for key, membership in sorted(from_source.items()):
        if key in wanted:
            continue
        audit_record(
            actor=user, action=actions.MEMBERSHIP_REVOKED, target=membership, department_id=membership.department_id,
            before={"user": user.get_username(), "role": membership.role}, details={"source": source},
        )
        membership.delete()
        changes.append(RoleChange(department_id=key[0], role=key[1], granted=False))
    for department_id, role in sorted(wanted - set(from_source) - other):
        membership = Membership.objects.create(user=user, department_id=department_id, role=role, source=source)
        audit_record(
            actor=user, action=actions.MEMBERSHIP_GRANTED, target=membership, department_id=department_id,
            after={"user": user.get_username(), "role": role}, details={"source": source},
        )
        changes.append(RoleChange(department_id=department_id, role=role, granted=True))
    if changes:
        access_forget(user)
    if any(not change.granted for change in changes):  # as department_member_remove does for a manual role
        project_members_unreadable_remove(actor=user, user=user, details={"source": source})
    return changes


def _sessions_end(user: User) -> int:
    """Delete the user's sessions (database sessions, the portal's engine)."""
    ended = 0
    for session in Session.objects.filter(expire_date__gt=clock_now()).iterator():
        if str(session.get_decoded().get("_auth_user_id")) == str(user.pk):
            session.delete()
            ended += 1
    return ended


@transaction.atomic
def account_deactivate(*, actor: User | None, user: User, reason: str) -> None:
    """Deactivate an account: its sessions end and every token it holds stops working, now."""
    User.objects.select_for_update(no_key=True).filter(pk=user.pk).first()
    now = clock_now()
    sessions = _sessions_end(user)
    tokens = PersonalAccessToken.objects.filter(user=user, revoked_at__isnull=True).update(revoked_at=now)
    was_active = user.is_active
    if was_active:
        user.is_active = False
        user.save(update_fields=["is_active"])
    audit_record(
        actor=actor, action=actions.ACCOUNT_DEACTIVATED, target=user,
        before={"is_active": was_active}, after={"is_active": False},
        details={"reason": reason, "sessions_ended_count": sessions, "tokens_revoked_count": tokens},
    )
    access_forget(user)


__all__ = ["MembershipSource", "RoleChange", "account_deactivate", "external_roles_sync"]

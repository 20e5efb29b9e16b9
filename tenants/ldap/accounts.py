"""Portal accounts vouched for by the directory: created on a first sign-in and linked to the entry
by ``ExternalIdentity(source=ldap, issuer, subject=<the entry's DN>)``; their LDAP roles recomputed
from their groups (by group DN, through ``ExternalGroupMapping``) at each sign-in and sync.

A local account (one without that link) whose username a directory user signs in with is never
taken over: the sign-in is refused and audited (``ldap.link_refused``); ``manage.py ldap_sync
--link USERNAME`` links it deliberately.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from django.contrib.auth.models import User
from django.db import transaction

from audit import actions
from audit.models import Outcome
from audit.services import audit_record
from kernel.clock import clock_now
from tenants.identity import RoleChange, external_roles_sync
from tenants.ldap.directory import dn_normal
from tenants.models import ExternalGroupMapping, ExternalIdentity, IdentitySource

log = logging.getLogger(__name__)

SOURCE = IdentitySource.LDAP


def ldap_identity_find(*, issuer: str, dn: str) -> ExternalIdentity | None:
    return (
        ExternalIdentity.objects.filter(source=SOURCE, issuer=issuer, subject=dn_normal(dn)).select_related("user").first()
    )


@transaction.atomic
def ldap_account_create(*, username: str, issuer: str, dn: str) -> User:
    """A new account for a directory entry (no usable password: it signs in through the directory)."""
    user = User(username=username)
    user.set_unusable_password()
    user.save()
    ldap_account_link(user=user, issuer=issuer, dn=dn, actor=None)
    return user


@transaction.atomic
def ldap_account_link(*, user: User, issuer: str, dn: str, actor: User | None) -> ExternalIdentity:
    identity = ExternalIdentity.objects.create(user=user, source=SOURCE, issuer=issuer, subject=dn_normal(dn))
    audit_record(
        actor=actor, action=actions.LDAP_ACCOUNT_LINKED, target=user,
        details={"username": user.username, "issuer": issuer, "dn": identity.subject},
    )  # fmt: skip
    return identity


@transaction.atomic
def ldap_link_refused(*, username: str, issuer: str, dn: str) -> None:
    log.warning(
        "directory sign-in refused: the local account %r is not linked to the directory entry %r", username, dn
    )
    audit_record(
        actor=None, action=actions.LDAP_LINK_REFUSED, outcome=Outcome.DENIED,
        details={"username": username, "issuer": issuer, "dn": dn_normal(dn)},
    )  # fmt: skip


def ldap_mapped_groups(groups: Collection[str]) -> list[str]:
    """The mapping table's LDAP groups that are among ``groups`` (DNs compared as the directory does)."""
    wanted = {dn_normal(group) for group in groups}
    mapped = ExternalGroupMapping.objects.filter(source=SOURCE).values_list("external_group", flat=True)
    return sorted({group for group in mapped if dn_normal(group) in wanted})


@transaction.atomic
def ldap_roles_apply(*, user: User, identity: ExternalIdentity, groups: Collection[str], login: bool) -> list[RoleChange]:
    """Recompute the user's LDAP roles from their groups; on a sign-in, note its time."""
    if login:
        identity.last_login_at = clock_now()
        identity.save(update_fields=["last_login_at"])
    return external_roles_sync(user=user, source=SOURCE, groups=ldap_mapped_groups(groups))

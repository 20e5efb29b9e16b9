"""The account behind a provider's subject, and the audited OIDC sign-in.

An account is found by (issuer, ``sub``) through ``ExternalIdentity`` and never by e-mail: an
address can change hands, a subject cannot. The first sign-in of a subject creates the account
(a free username from ``preferred_username``, no usable password), audited
``account.provisioned_oidc``. Every sign-in then recomputes the roles that came from the provider
(``tenants.identity.external_roles_sync``) and is audited ``auth.login`` with ``via: oidc``.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from audit import actions
from audit.models import Outcome
from audit.services import audit_record
from tenants.identity import external_roles_sync
from tenants.models import ExternalIdentity, IdentitySource
from tenants.oidc.claims import claims_groups, username_for

SOURCE = IdentitySource.OIDC


class AccountRefused(Exception):
    """The subject's account exists but may not sign in (deactivated)."""

    def __init__(self, message: str, *, subject: str) -> None:
        super().__init__(message)
        self.subject = subject


def oidc_identity_user(*, issuer: str, subject: str) -> User | None:
    """The active account of a subject, or ``None`` (unknown subject, or the account is deactivated)."""
    identity = (
        ExternalIdentity.objects.select_related("user")
        .filter(source=SOURCE, issuer=issuer, subject=subject).first()
    )
    if identity is None or not identity.user.is_active:
        return None
    return identity.user


def _profile(claims: dict[str, Any]) -> dict[str, str]:
    def text(name: str, limit: int) -> str:
        value = claims.get(name)
        return value[:limit] if isinstance(value, str) else ""

    return {"email": text("email", 254), "first_name": text("given_name", 150), "last_name": text("family_name", 150)}


@transaction.atomic
def oidc_signin(*, issuer: str, claims: dict[str, Any], groups_claim: str) -> User:
    """The account of the ID token's subject (created at the first sign-in), its provider roles
    recomputed from the groups claim, the sign-in audited. Raises ``AccountRefused`` for a
    deactivated account (nothing changes then)."""
    subject = str(claims["sub"])
    identity = (
        ExternalIdentity.objects.select_for_update(of=("self",)).select_related("user")
        .filter(issuer=issuer, subject=subject).first()
    )
    profile = _profile(claims)
    if identity is None:
        user = User(username=username_for(claims), **profile)
        user.set_unusable_password()
        user.save()
        identity = ExternalIdentity.objects.create(user=user, source=SOURCE, issuer=issuer, subject=subject)
        audit_record(
            actor=user, action=actions.ACCOUNT_PROVISIONED_OIDC, target=user,
            after={"username": user.username, "email": user.email},
            details={"issuer": issuer, "subject": subject},
        )
    else:
        user = identity.user
        if not user.is_active:
            raise AccountRefused(f"the account {user.username} is deactivated", subject=subject)
        changed = [name for name, value in profile.items() if value and getattr(user, name) != value]
        for name in changed:
            setattr(user, name, profile[name])
        if changed:
            user.save(update_fields=changed)
    identity.last_login_at = timezone.now()
    identity.save(update_fields=["last_login_at"])
    groups = claims_groups(claims, path=groups_claim)
    changes = external_roles_sync(user=user, source=SOURCE, groups=groups)
    audit_record(
        actor=user, action=actions.AUTH_LOGIN,
        details={"via": "oidc", "issuer": issuer, "subject": subject, "roles_changed_count": len(changes)},
    )
    return user


@transaction.atomic
def oidc_signin_failed(*, reason: str, subject: str | None = None) -> None:
    """A refused OIDC sign-in (bad token, provider error, deactivated account), audited."""
    details: dict[str, Any] = {"via": "oidc", "reason": reason[:500]}
    if subject is not None:
        details["subject"] = subject[:500]
    audit_record(actor=None, action=actions.AUTH_LOGIN_FAILED, details=details, outcome=Outcome.DENIED)

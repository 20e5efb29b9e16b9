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
from django.db import IntegrityError, transaction

from audit import actions
from audit.models import Outcome
from audit.services import audit_record
from kernel.clock import clock_now
from tenants.identity import external_roles_sync
from tenants.models import ExternalIdentity, IdentitySource
from tenants.oidc.claims import claims_groups, username_for

SOURCE = IdentitySource.OIDC
_PROVISION_TRIES = 5  # usernames taken between the check and the insert, one after another


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


def _identity_locked(*, issuer: str, subject: str) -> ExternalIdentity | None:
    return (
        ExternalIdentity.objects.select_for_update(of=("self",)).select_related("user")
        .filter(issuer=issuer, subject=subject).first()
    )


def _account_provision(*, issuer: str, subject: str, claims: dict[str, Any]) -> ExternalIdentity | None:
    """The new account and identity of a subject's first sign-in, audited; ``None`` when another
    sign-in of the same subject created them first (two callbacks at once). Each try is a savepoint:
    a username taken since ``username_for`` looked is tried again with the next free name."""
    attempt = 1
    while True:
        username = username_for(claims)
        try:
            with transaction.atomic():
                user = User(username=username, **_profile(claims))
                user.set_unusable_password()
                user.save()
                identity = ExternalIdentity.objects.create(user=user, source=SOURCE, issuer=issuer, subject=subject)
        except IntegrityError:
            if ExternalIdentity.objects.filter(issuer=issuer, subject=subject).exists():
                return None
            if attempt == _PROVISION_TRIES:
                raise
            attempt += 1
            continue
        audit_record(
            actor=user, action=actions.ACCOUNT_PROVISIONED_OIDC, target=user,
            after={"username": user.username, "email": user.email},
            details={"issuer": issuer, "subject": subject},
        )
        return identity


@transaction.atomic
def oidc_signin(*, issuer: str, claims: dict[str, Any], groups_claim: str) -> User:
    """The account of the ID token's subject (created at the first sign-in), its provider roles
    recomputed from the groups claim, the sign-in audited. Raises ``AccountRefused`` for a
    deactivated account (nothing changes then). Two first sign-ins of one subject at once end on
    the one account that the first of them created."""
    subject = str(claims["sub"])
    identity = _identity_locked(issuer=issuer, subject=subject)
    if identity is None:
        identity = _account_provision(issuer=issuer, subject=subject, claims=claims) or _identity_locked(
            issuer=issuer, subject=subject
        )
        assert identity is not None  # None above: the sign-in that won the race committed it
    user = identity.user
    if not user.is_active:
        raise AccountRefused(f"the account {user.username} is deactivated", subject=subject)
    profile = _profile(claims)
    changed = [name for name, value in profile.items() if value and getattr(user, name) != value]
    for name in changed:
        setattr(user, name, profile[name])
    if changed:
        user.save(update_fields=changed)
    identity.last_login_at = clock_now()
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

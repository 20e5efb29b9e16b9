"""Sign-in events: a login that succeeded, one that failed (or was refused by the throttle), an API
token issued for a password. Each is written to the audit log in its own transaction."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, User
from django.db import transaction

from audit import actions
from audit.models import AuditEvent, Outcome
from audit.services import audit_record
from kernel.clock import clock_now
from kernel.times import minute_utc
from tenants.access_tokens import IssuedToken, access_token_create
from tenants.models import TokenScope
from tenants.signin_lockout import USERNAME_MAX_LENGTH


@transaction.atomic
def auth_login_succeeded(*, user: AbstractBaseUser, via: str) -> AuditEvent:
    return audit_record(actor=user, action=actions.AUTH_LOGIN, details={"via": via})


@transaction.atomic
def auth_login_failed(*, username: str, via: str, reason: str | None = None) -> AuditEvent:
    """A refused attempt, with the username as typed (never the password); ``reason`` is recorded
    when given ("bad credentials", "throttled")."""
    details = {"username": username[:USERNAME_MAX_LENGTH], "via": via}
    if reason is not None:
        details["reason"] = reason
    return audit_record(actor=None, action=actions.AUTH_LOGIN_FAILED, details=details, outcome=Outcome.DENIED)


@transaction.atomic
def auth_token_issue(*, user: User) -> IssuedToken:
    """An expiring API token for a user who signed in with a password (``POST /api/v1/auth/token/``):
    a new personal access token of scope ``write`` named "password sign-in <date>", with the default
    expiry, audited ``access_token.created`` (via ``password``) without the token itself."""
    name = f"password sign-in {minute_utc(clock_now())}"
    return access_token_create(actor=user, name=name, scope=TokenScope.WRITE, via="password")


@transaction.atomic
def auth_logged_out(*, user: AbstractBaseUser, via: str) -> AuditEvent:
    return audit_record(actor=user, action=actions.AUTH_LOGOUT, details={"via": via})

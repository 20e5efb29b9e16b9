"""Sign-in events: a login that succeeded, one that failed (or was refused by the throttle), an API
token issued. Each is written to the audit log in its own transaction."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from rest_framework.authtoken.models import Token

from audit import actions
from audit.models import AuditEvent, Outcome
from audit.services import audit_record
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
def auth_token_issue(*, user: AbstractBaseUser) -> Token:
    """The user's API token (created on first use), audited without the token itself."""
    token, _ = Token.objects.get_or_create(user=user)
    audit_record(actor=user, action=actions.AUTH_TOKEN_ISSUED, target=user, details={"via": "api_token"})
    return token


@transaction.atomic
def auth_logged_out(*, user: AbstractBaseUser, via: str) -> AuditEvent:
    return audit_record(actor=user, action=actions.AUTH_LOGOUT, details={"via": via})

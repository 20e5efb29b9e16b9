"""Personal access tokens: API tokens a user creates, scopes, and revokes (docs/identity.md "API tokens").

A token reads ``gpp_<id><secret>``: ``gpp_`` and 12 letters or digits (the public ``prefix``, 16
characters, kept to find and show the token), then 43 letters or digits (256 random bits). Only the
SHA-256 of the whole text is stored (``key_hash``) and it is compared in constant time; a fast hash
is enough for a secret of that entropy, and a slow one would cost every API call. The text is
returned once, by ``access_token_create``, and never stored, logged or audited.

- scope ``read``: safe methods only (GET, HEAD, OPTIONS); ``write``: whatever the user's roles allow.
- expiry: ``GPUPORTAL_TOKEN_DEFAULT_DAYS`` (90) unless given; at most ``GPUPORTAL_TOKEN_MAX_DAYS``
  (365) ahead; never in the past.
- ``last_used_at``: written at most once a minute per token (``USE_RECORD_INTERVAL``), not per request.

Users create tokens for themselves. Where an operator must set one up for somebody (a service
account, a person who cannot reach the form), a platform admin *issues* it (``access_token_issue``,
the admin site): the row is made with its name, scope, expiry and the stated reason, audited with
both the issuer and the owner, and it has no text yet. Only its owner, signed in as themselves,
*claims* it (``access_token_claim``) and sees the text, once. The issuer never holds a key that
acts as the owner, so whatever a token does is the owner's own act (docs/identity.md).
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import re
import secrets
import string
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q, QuerySet
from django.http import Http404
from django.utils import timezone

from audit import actions
from audit.services import audit_record
from kernel.clock import clock_now
from kernel.conf import setting_int
from kernel.errors import Conflict, FieldError, NotAllowed
from kernel.times import minute_utc
from tenants.access import access_for
from tenants.models import PersonalAccessToken, TokenScope

TOKEN_PREFIX = "gpp_"  # noqa: S105 - the public marker of a portal token, no secret
ID_LENGTH = 12
SECRET_LENGTH = 43  # 43 characters of 62: 256 bits
PREFIX_LENGTH = len(TOKEN_PREFIX) + ID_LENGTH  # 16, the model's prefix field
NAME_MAX_LENGTH = 100
USE_RECORD_INTERVAL = datetime.timedelta(minutes=1)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_ALPHABET = string.ascii_letters + string.digits
_FORM = re.compile(rf"{TOKEN_PREFIX}(?P<id>[A-Za-z0-9]{{{ID_LENGTH}}})[A-Za-z0-9]{{{SECRET_LENGTH}}}")
_NO_SUCH_HASH = hashlib.sha256(b"no such token").hexdigest()


@dataclass(frozen=True)
class IssuedToken:
    """A token just created: the row, and ``key``, the whole token text, shown to its owner once."""

    token: PersonalAccessToken
    key: str


class TokenRefused(Exception):
    """Why a well-formed token does not authenticate (the API answers 401 with this message)."""


# ------------------------------------------------------------------------------------ the text


def token_hash(text: str) -> str:
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def token_prefix_of(text: str) -> str | None:
    """The public prefix (``gpp_`` and the id) of a well-formed token, else None."""
    match = _FORM.fullmatch(text)
    return text[:PREFIX_LENGTH] if match is not None else None


def is_access_token(text: str) -> bool:
    """Whether ``text`` claims to be a personal access token (it starts with ``gpp_``)."""
    return text.startswith(TOKEN_PREFIX)


def _random(length: int) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


def _token_text() -> str:
    return TOKEN_PREFIX + _random(ID_LENGTH) + _random(SECRET_LENGTH)


# ---------------------------------------------------------------------------------- the rules


def token_default_days() -> int:
    return min(setting_int("GPUPORTAL_TOKEN_DEFAULT_DAYS"), token_max_days())


def token_max_days() -> int:
    return setting_int("GPUPORTAL_TOKEN_MAX_DAYS")


def token_expiry_check(
    *, expires_at: datetime.datetime | None, now: datetime.datetime, not_after: datetime.datetime | None = None
) -> datetime.datetime:
    """The expiry a new token gets: the default when none is asked for; a 400 naming ``expires_at``
    for a moment in the past or beyond the maximum (a minute's grace for a form filled at "now + max").
    ``not_after``: the expiry of the token the request came with, which the new one may not outlive."""
    if expires_at is None:
        default = now + datetime.timedelta(days=token_default_days())
        return min(default, not_after) if not_after is not None else default
    if timezone.is_naive(expires_at):
        raise FieldError("expires_at", "Give a time zone (for example 2030-01-01T00:00:00Z).")
    if expires_at <= now:
        raise FieldError("expires_at", "The expiry must be in the future.")
    latest = now + datetime.timedelta(days=token_max_days())
    if expires_at > latest + datetime.timedelta(minutes=1):
        raise FieldError("expires_at", f"At most {token_max_days()} days from now ({minute_utc(latest)}).")
    if not_after is not None and expires_at > not_after:
        raise FieldError("expires_at", f"A token may not outlive the token that creates it ({minute_utc(not_after)}).")
    return expires_at


def _free_prefix() -> str:
    prefix = TOKEN_PREFIX + _random(ID_LENGTH)
    while PersonalAccessToken.objects.filter(prefix=prefix).exists():  # 71 bits: never, in practice
        prefix = TOKEN_PREFIX + _random(ID_LENGTH)
    return prefix


def _name_check(name: str) -> str:
    name = name.strip()
    if not name:
        raise FieldError("name", "Give the token a name (what it is for).")
    if len(name) > NAME_MAX_LENGTH:
        raise FieldError("name", f"At most {NAME_MAX_LENGTH} characters.")
    return name


# ---------------------------------------------------------------------------- services


@transaction.atomic
def access_token_create(
    *, actor: User, name: str, scope: str, expires_at: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None, via: str = "api",
) -> IssuedToken:
    """A new token for ``actor`` (users create tokens only for themselves), audited
    ``access_token.created`` with its prefix, never its text."""
    if not actor.is_active:
        raise NotAllowed("An inactive account cannot create tokens.")
    name = _name_check(name)
    if scope not in TokenScope.values:
        raise FieldError("scope", f"One of: {', '.join(TokenScope.values)}.")
    now = clock_now()
    expiry = token_expiry_check(expires_at=expires_at, now=now, not_after=not_after)
    text = _free_prefix() + _random(SECRET_LENGTH)
    token = PersonalAccessToken.objects.create(
        user=actor, name=name, prefix=text[:PREFIX_LENGTH], key_hash=token_hash(text), scope=scope, expires_at=expiry,
    )
    audit_record(
        actor=actor, action=actions.ACCESS_TOKEN_CREATED, target=token,
        after={"name": name, "prefix": token.prefix, "scope": scope, "expires_at": expiry},
        details={"via": via},
    )
    return IssuedToken(token=token, key=text)


REASON_MAX_LENGTH = 500


@transaction.atomic
def access_token_issue(
    *, actor: User, user: User, name: str, scope: str, reason: str,
    expires_at: datetime.datetime | None = None, via: str = "admin",
) -> PersonalAccessToken:
    """A platform admin sets up a token for ``user``: audited ``access_token.issued`` naming both,
    with the reason. The token has no text until its owner claims it, so nobody but the owner can
    ever use it; it shows in the owner's list as ``pending``."""
    if not access_for(actor).is_platform_admin:
        raise NotAllowed("Only platform admins issue tokens for someone else.")
    if user.pk == actor.pk:
        raise FieldError("user", "Create your own tokens on your API tokens page, not by issuing them.")
    if not user.is_active:
        raise FieldError("user", "An inactive account cannot hold tokens.")
    name = _name_check(name)
    if scope not in TokenScope.values:
        raise FieldError("scope", f"One of: {', '.join(TokenScope.values)}.")
    reason = reason.strip()
    if not reason:
        raise FieldError("reason", "Say why you issue a token for someone else (it is audited and shown to them).")
    if len(reason) > REASON_MAX_LENGTH:
        raise FieldError("reason", f"At most {REASON_MAX_LENGTH} characters.")
    now = clock_now()
    expiry = token_expiry_check(expires_at=expires_at, now=now)
    prefix = _free_prefix()
    token = PersonalAccessToken.objects.create(
        user=user, name=name, prefix=prefix, key_hash=token_hash(_token_text()), scope=scope, expires_at=expiry,
        issued_by=actor, issue_reason=reason,
    )  # the hash of a text nobody keeps: nothing matches it until the owner claims the token
    audit_record(
        actor=actor, action=actions.ACCESS_TOKEN_ISSUED, target=token,
        after={"name": name, "prefix": prefix, "scope": scope, "expires_at": expiry},
        details={"via": via, "owner": user.get_username(), "issued_by": actor.get_username(), "reason": reason},
    )
    return token


@transaction.atomic
def access_token_claim(*, actor: User, token_id: int, via: str = "api") -> IssuedToken:
    """The owner takes the text of a token a platform admin issued for them: shown once, here.
    Anyone else's token is a 404; a token already claimed, revoked or expired is a 409."""
    token = PersonalAccessToken.objects.select_for_update().filter(pk=token_id, user_id=actor.pk).first()
    if token is None:
        raise Http404("No such token among yours.")
    if not token.pending:
        raise Conflict("This token is not waiting to be claimed: its text was taken already, or you created it.")
    state = token_state(token)
    if state != "pending":
        raise Conflict(f"This token is {state}: it can no longer be claimed.")
    if not actor.is_active:
        raise NotAllowed("An inactive account cannot claim tokens.")
    text = token.prefix + _random(SECRET_LENGTH)
    token.key_hash = token_hash(text)
    token.claimed_at = clock_now()
    token.save(update_fields=["key_hash", "claimed_at"])
    audit_record(
        actor=actor, action=actions.ACCESS_TOKEN_CLAIMED, target=token,
        before={"claimed_at": None}, after={"claimed_at": token.claimed_at},
        details={"via": via, "prefix": token.prefix,
                 "issued_by": token.issued_by.get_username() if token.issued_by is not None else None},
    )
    return IssuedToken(token=token, key=text)


@transaction.atomic
def access_token_revoke(*, actor: User, token_id: int, via: str = "api") -> PersonalAccessToken:
    """Revoke a token: its owner's own, or any for a platform admin (the admin site). Revoking a
    revoked token changes nothing and records nothing."""
    token = PersonalAccessToken.objects.select_for_update().filter(pk=token_id).first()
    if token is None or (token.user_id != actor.pk and not access_for(actor).is_platform_admin):
        raise Http404("No such token among yours.")
    if token.revoked_at is not None:
        return token
    token.revoked_at = clock_now()
    token.save(update_fields=["revoked_at"])
    audit_record(
        actor=actor, action=actions.ACCESS_TOKEN_REVOKED, target=token,
        before={"revoked_at": None}, after={"revoked_at": token.revoked_at},
        details={"via": via, "prefix": token.prefix, "name": token.name, "owner": token.user.get_username()},
    )
    return token


def access_token_authenticate(*, text: str, now: datetime.datetime | None = None) -> PersonalAccessToken:
    """The token that ``text`` is, with its user; ``TokenRefused`` when it is malformed, unknown,
    revoked, expired, or its user inactive. Records the use (at most once a minute)."""
    now = now or clock_now()
    prefix = token_prefix_of(text)
    if prefix is None:
        raise TokenRefused("Malformed access token.")
    token = PersonalAccessToken.objects.select_related("user").filter(prefix=prefix).first()
    digest = token_hash(text)
    matches = hmac.compare_digest(digest, token.key_hash if token is not None else _NO_SUCH_HASH)
    if token is None or not matches:
        raise TokenRefused("Invalid access token.")
    if token.revoked_at is not None:
        raise TokenRefused("This access token has been revoked.")
    if token.pending:  # unreachable through a hash nobody knows; kept so that the rule is stated
        raise TokenRefused("This access token has not been claimed by its owner.")
    if token.expires_at <= now:
        raise TokenRefused(f"This access token expired at {minute_utc(token.expires_at)}; create a new one.")
    if not token.user.is_active:
        raise TokenRefused("User inactive or deleted.")
    access_token_use_record(token=token, now=now)
    return token


def access_token_use_record(*, token: PersonalAccessToken, now: datetime.datetime) -> None:
    """Set ``last_used_at`` unless it was set less than a minute ago: one conditional UPDATE, so
    concurrent requests write it once and a busy token costs a write a minute, not one a request."""
    if token.last_used_at is not None and now - token.last_used_at < USE_RECORD_INTERVAL:
        return
    PersonalAccessToken.objects.filter(pk=token.pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - USE_RECORD_INTERVAL)
    ).update(last_used_at=now)
    token.last_used_at = now


# ---------------------------------------------------------------------------- selectors


def access_token_list(*, user: User, state: str | None = None, now: datetime.datetime | None = None) -> QuerySet[PersonalAccessToken]:
    """The user's own tokens, newest first; ``state`` one of pending, active, expired, revoked."""
    now = now or clock_now()
    tokens = PersonalAccessToken.objects.filter(user=user).select_related("issued_by")
    unclaimed = Q(issued_by__isnull=False, claimed_at__isnull=True)
    if state == "pending":
        tokens = tokens.filter(unclaimed, revoked_at__isnull=True, expires_at__gt=now)
    elif state == "active":
        tokens = tokens.filter(revoked_at__isnull=True, expires_at__gt=now).exclude(unclaimed)
    elif state == "expired":
        tokens = tokens.filter(revoked_at__isnull=True, expires_at__lte=now)
    elif state == "revoked":
        tokens = tokens.filter(revoked_at__isnull=False)
    return tokens.order_by("-created_at", "-id")


def access_token_get(*, user: User, token_id: int) -> PersonalAccessToken:
    """One of the user's own tokens; anyone else's reads as missing (404)."""
    token = PersonalAccessToken.objects.filter(user=user, pk=token_id).select_related("issued_by").first()
    if token is None:
        raise Http404("No such token among yours.")
    return token


def token_state(token: PersonalAccessToken, *, now: datetime.datetime | None = None) -> str:
    if token.revoked_at is not None:
        return "revoked"
    if token.expires_at <= (now or clock_now()):
        return "expired"
    if token.pending:
        return "pending"
    return "active"

"""The sign-in lockout: one policy for every way a password is presented (the portal's form, the API's
token endpoint, the admin site's login, and any authentication backend added later).

Failed password checks are counted per username (case-insensitively, whether or not such a user
exists) and per client address (``kernel.client_address``, through ``GPUPORTAL_TRUSTED_PROXIES``; an
IPv6 address counts for its /64). When either count reaches its limit within the window, that
username or address is locked for ``GPUPORTAL_SIGNIN_LOCK_SECONDS``: every attempt is refused
without checking the password, the right one included, and the lock is audited once
(``auth.locked_out``). A platform admin may lift a lock early (``signin_lock_lift``, audited
``auth.unlocked``). A correct password clears the username's count, never the address's.

Counts and locks live in Django's default cache, which must be shared by every web process in
production (``GPUPORTAL_CACHE_URL``, Redis). docs/security.md describes the policy for operators.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import math
import time
from dataclasses import dataclass
from typing import Literal

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.cache import cache
from django.db import transaction

from audit import actions
from audit.models import Outcome
from audit.services import audit_record
from kernel.client_address import ip_normalised
from kernel.conf import setting_int

USERNAME_MAX_LENGTH = 150
_PREFIX = "gpuportal:signin"

Scope = Literal["username", "address"]


@dataclass(frozen=True)
class SigninLock:
    """A lock in force: on a username (lower-cased) or an address (an IPv6 address as its /64)."""

    scope: Scope
    subject: str
    until: float  # seconds since the epoch

    @property
    def retry_after(self) -> int:
        """Whole seconds until the lock ends (at least 1), for ``Retry-After``."""
        return max(1, math.ceil(self.until - time.time()))

    @property
    def retry_after_minutes(self) -> int:
        return math.ceil(self.retry_after / 60)

    @property
    def until_iso(self) -> str:
        return datetime.datetime.fromtimestamp(self.until, tz=datetime.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class _Subject:
    scope: Scope
    subject: str
    limit: int

    def _key(self, kind: str) -> str:
        digest = hashlib.sha256(self.subject.encode()).hexdigest()[:32]
        return f"{_PREFIX}:{kind}:{self.scope}:{digest}"

    @property
    def failures_key(self) -> str:
        return self._key("failures")

    @property
    def lock_key(self) -> str:
        return self._key("lock")


def username_normalised(username: str) -> str:
    return username.strip().lower()[:USERNAME_MAX_LENGTH]


def address_bucket(address: str) -> str:
    """The address whose failures count together: an IPv4 address itself, an IPv6 address its /64
    (one host commonly holds a whole /64); anything else as given."""
    normalised = ip_normalised(address)
    if normalised is None:
        return address.strip()
    parsed = ipaddress.ip_address(normalised)
    if isinstance(parsed, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network(f"{parsed}/64", strict=False))
    return normalised


def _subjects(*, username: str | None, address: str | None) -> list[_Subject]:
    subjects = []
    if username is not None and username_normalised(username):
        subjects.append(_Subject("username", username_normalised(username),
                                 setting_int("GPUPORTAL_SIGNIN_FAILURES_PER_USERNAME")))
    if address:
        subjects.append(_Subject("address", address_bucket(address), setting_int("GPUPORTAL_SIGNIN_FAILURES_PER_ADDRESS")))
    return subjects


def signin_lock_find(*, username: str | None, address: str | None) -> SigninLock | None:
    """The lock in force on ``username`` or ``address``, the one that ends last when both are locked."""
    subjects = _subjects(username=username, address=address)
    found = cache.get_many([subject.lock_key for subject in subjects])
    locks = [
        SigninLock(scope=subject.scope, subject=subject.subject, until=float(found[subject.lock_key]))
        for subject in subjects
        if subject.lock_key in found
    ]
    locks = [lock for lock in locks if lock.until > time.time()]
    return max(locks, key=lambda lock: lock.until, default=None)


def _count(key: str, window: int) -> int:
    if cache.add(key, 1, timeout=window):
        return 1
    try:
        return int(cache.incr(key))
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=window)
        return 1


@transaction.atomic
def _lock_place(subject: _Subject, *, failures: int, window: int) -> SigninLock:
    """Lock ``subject``; only the process that places the lock audits it, so a lock is audited once."""
    lock_seconds = setting_int("GPUPORTAL_SIGNIN_LOCK_SECONDS")
    lock = SigninLock(scope=subject.scope, subject=subject.subject, until=time.time() + lock_seconds)
    if not cache.add(subject.lock_key, lock.until, timeout=lock_seconds):
        existing = cache.get(subject.lock_key)
        return lock if existing is None else SigninLock(scope=lock.scope, subject=lock.subject, until=float(existing))
    cache.delete(subject.failures_key)  # after the lock, a fresh allowance
    audit_record(
        actor=None,
        action=actions.AUTH_LOCKED_OUT,
        details={
            "scope": subject.scope, subject.scope: subject.subject, "failures": failures,
            "window_seconds": window, "lock_seconds": lock_seconds, "until": lock.until_iso,
        },
        outcome=Outcome.DENIED,
    )
    return lock


def signin_failure_record(*, username: str | None, address: str | None) -> SigninLock | None:
    """Count one failed password check against ``username`` and ``address``; lock (and audit) whichever
    reached its limit. Attempts refused by a lock are not failures: never call this for them."""
    window = setting_int("GPUPORTAL_SIGNIN_WINDOW_SECONDS")
    placed: list[SigninLock] = []
    for subject in _subjects(username=username, address=address):
        failures = _count(subject.failures_key, window)
        if failures >= subject.limit:
            placed.append(_lock_place(subject, failures=failures, window=window))
    return max(placed, key=lambda lock: lock.until, default=None)


def signin_success_record(*, username: str) -> None:
    """A correct password clears the username's count (not the address's: one right password must
    not reset an address's budget for guessing other accounts)."""
    for subject in _subjects(username=username, address=None):
        cache.delete(subject.failures_key)


@transaction.atomic
def signin_lock_lift(
    *, actor: AbstractBaseUser | AnonymousUser | None, username: str | None = None, address: str | None = None, via: str
) -> bool:
    """Lift the lock on ``username`` or on ``address`` (exactly one) and forget its failures, audited
    ``auth.unlocked`` with ``actor``; whether a lock was in force."""
    subjects = _subjects(username=username, address=address) if (username is None) != (address is None) else []
    if len(subjects) != 1:
        raise ValueError("give exactly one of username and address, not empty")
    subject = subjects[0]
    was_locked = cache.get(subject.lock_key) is not None
    audit_record(
        actor=actor,
        action=actions.AUTH_UNLOCKED,
        details={"scope": subject.scope, subject.scope: subject.subject, "was_locked": was_locked, "via": via},
    )
    cache.delete_many([subject.lock_key, subject.failures_key])
    return was_locked

"""Checking a password, under the sign-in lockout (``tenants.signin_lockout``), wherever it is presented.

- ``signin_authenticate``: the portal's form, the admin site's login form and the API's token
  endpoint check passwords through it: a locked username or address is refused without checking the
  password, a failure is audited (``auth.login_failed``) and counted, a success clears the count.
- ``LockoutGateBackend``: the first of ``AUTHENTICATION_BACKENDS``. Any other call of Django's
  ``authenticate()`` (a backend added later, such as LDAP, or code that calls it directly) meets
  the same locks, since the gate refuses before any backend checks the password.
- ``failure_count``: a receiver of ``user_login_failed``, so that failures of such other calls are
  counted too (those of ``signin_authenticate`` are counted there, after their audit event).
- ``SigninForm`` / ``AdminSigninForm``: Django's login forms, checking through ``signin_authenticate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, cast

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import authenticate
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.models import AbstractBaseUser, User
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest
from django.views.decorators.debug import sensitive_variables

from kernel.client_address import client_address
from tenants.auth import auth_login_failed
from tenants.oidc.conf import password_signin_enabled
from tenants.signin_lockout import (
    SigninLock,
    signin_failure_record,
    signin_lock_find,
    signin_success_record,
)

_HANDLED = "_gpuportal_signin_handled"  # set on a request whose failures signin_authenticate counts itself
_REFUSED = "_gpuportal_signin_refused"  # the lock the gate refused a request's attempt with


@dataclass(frozen=True)
class SignIn:
    """The outcome of one password check: the user, or the lock that refused it, or neither (wrong)."""

    user: AbstractBaseUser | None = None
    lock: SigninLock | None = None
    disabled: bool = False  # password sign-in is turned off (GPUPORTAL_AUTH_PASSWORD)


@sensitive_variables("password")
def signin_authenticate(request: HttpRequest | None, *, username: str, password: str, via: str) -> SignIn:
    """Check ``username`` and ``password`` unless a lock refuses the attempt; audit a refusal or a
    failure as ``auth.login_failed`` (reason ``throttled`` or ``bad credentials``) with ``via``.
    The attempt whose failure places a lock is still answered as wrong credentials. With password
    sign-in turned off (single sign-on only), every attempt is refused and audited, and counts nothing."""
    if not password_signin_enabled():
        auth_login_failed(username=username, via=via, reason="password sign-in off")
        return SignIn(disabled=True)
    address = client_address(request) if request is not None else None
    lock = signin_lock_find(username=username, address=address)
    if lock is None:
        if request is not None:
            setattr(request, _HANDLED, True)
        user = authenticate(request, username=username, password=password)
        if user is not None:
            signin_success_record(username=username)
            return SignIn(user=user)
        lock = getattr(request, _REFUSED, None)  # locked meanwhile, by another process
        if lock is None:
            auth_login_failed(username=username, via=via, reason="bad credentials")
            signin_failure_record(username=username, address=address)
            return SignIn()
    auth_login_failed(username=username, via=via, reason="throttled")
    return SignIn(lock=lock)


class LockoutGateBackend:
    """Refuses (``PermissionDenied``, which stops Django's ``authenticate``) a password attempt on a
    locked username or from a locked address. It checks no password and never returns a user; it has
    no ``get_user``, so sessions and ``force_login`` keep using the backend that signed the user in."""

    def authenticate(self, request: Any, username: str | None = None, password: str | None = None,
                     **kwargs: Any) -> None:
        if username is None:
            return None
        lock = signin_lock_find(username=username, address=client_address(request) if request is not None else None)
        if lock is not None:
            if request is not None:
                setattr(request, _REFUSED, lock)
            raise PermissionDenied("sign-in locked")
        return None


def failure_count(sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any) -> None:
    """Count a failed ``authenticate()`` that ``signin_authenticate`` did not make (see the module)."""
    username = credentials.get("username")
    if not isinstance(username, str) or getattr(request, _HANDLED, False):
        return
    address = client_address(request) if request is not None else None
    if getattr(request, _REFUSED, None) is not None or signin_lock_find(username=username, address=address):
        return  # refused by a lock: not a guess
    signin_failure_record(username=username, address=address)


LOCKED_MESSAGE = "Too many failed attempts. Try again in {minutes} minutes."


class SigninForm(AuthenticationForm):
    """Django's login form, checking the password through ``signin_authenticate``; when a lock refused
    the attempt, ``lock`` holds it and the form's error has the code ``locked``."""

    via: ClassVar[str] = "portal"
    lock: SigninLock | None = None

    @sensitive_variables()
    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if username is not None and password:
            outcome = signin_authenticate(self.request, username=username, password=password, via=self.via)
            if outcome.disabled:
                raise ValidationError("Sign-in with a password is turned off here.", code="disabled")
            if outcome.lock is not None:
                self.lock = outcome.lock
                raise ValidationError(LOCKED_MESSAGE.format(minutes=outcome.lock.retry_after_minutes), code="locked")
            if outcome.user is None:
                raise self.get_invalid_login_error()
            self.user_cache = cast(User, outcome.user)  # the project's user model
            self.confirm_login_allowed(self.user_cache)
        return self.cleaned_data


class AdminSigninForm(SigninForm, AdminAuthenticationForm):
    """The admin site's login form (staff only, as Django's), under the same lockout."""

    via: ClassVar[str] = "admin"

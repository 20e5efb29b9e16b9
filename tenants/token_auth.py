"""The API's token authentication (``REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]``).

- ``AccessTokenAuthentication``: a personal access token (``tenants.access_tokens``) as
  ``Authorization: Bearer gpp_…`` or ``Authorization: Token gpp_…`` (the scheme the CLI and older
  scripts send). A value that does not start with ``gpp_`` is not its business: it returns None,
  so the classes after it (the identity provider's JWT bearer class, the session) may take it. A ``gpp_`` value that is malformed, unknown, revoked or expired, or whose user is
  inactive, is a 401; a ``read`` token on an unsafe method is a 403 ``insufficient_scope``.
- Keys of the old kind (DRF's ``Token``: 40 hexadecimal digits, stored in plain text, and mintable
  for anyone in the admin site) are no longer accepted and no longer stored (tenants migration
  0004 drops them): such a value is a 401 that says so and how to get a personal access token.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

from tenants.access_tokens import (
    SAFE_METHODS,
    TokenRefused,
    access_token_authenticate,
    is_access_token,
)
from tenants.models import PersonalAccessToken, TokenScope
from tenants.oidc.drf import ProviderAccessToken

SCHEMES = ("bearer", "token")
RETIRED_KEY = re.compile(r"[0-9a-fA-F]{40}")
RETIRED_KEY_MESSAGE = (
    "API keys of the old kind (40 hexadecimal digits) are no longer accepted, and none is stored any more. "
    "Sign in again (gpuportal login, or POST /api/v1/auth/token/) or create a personal access token "
    "on the portal's API tokens page."
)


class InsufficientScope(exceptions.PermissionDenied):
    default_code = "insufficient_scope"


def _credentials(request: Request) -> str | None:
    """The credentials of an ``Authorization: Bearer|Token <value>`` header, else None."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if not isinstance(header, str):
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() not in SCHEMES:
        return None
    return value.strip()


class AccessTokenAuthentication(BaseAuthentication):
    """``request.auth`` is the ``PersonalAccessToken``."""

    def authenticate(self, request: Request) -> tuple[User, PersonalAccessToken] | None:
        value = _credentials(request)
        if value is not None and RETIRED_KEY.fullmatch(value):
            raise exceptions.AuthenticationFailed(RETIRED_KEY_MESSAGE)
        if value is None or not is_access_token(value):
            return None
        try:
            token = access_token_authenticate(text=value)
        except TokenRefused as refused:
            raise exceptions.AuthenticationFailed(str(refused)) from None
        method = str(request.method).upper()
        if token.scope != TokenScope.WRITE and method not in SAFE_METHODS:
            raise InsufficientScope(
                f"This token's scope is {token.scope}: it may only read (GET, HEAD, OPTIONS). "
                f"{method} needs a token of scope write."
            )
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="gpuportal"'


def credential_expiry(credential: object) -> datetime.datetime | None:
    """When the token a request authenticated with stops working (None for a session): a token may
    not mint a token that outlives it, or a leaked one could renew itself past its expiry. The
    provider's access token (a JWT) stops at its ``exp``."""
    if isinstance(credential, PersonalAccessToken):
        return credential.expires_at
    if isinstance(credential, ProviderAccessToken):  # its ``exp``, which access_token_verify requires
        return datetime.datetime.fromtimestamp(int(credential.claims["exp"]), tz=datetime.UTC)
    return None


class AccessTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = AccessTokenAuthentication
    name = "accessToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http", "scheme": "bearer",
            "description": "A personal access token (gpp_...): 'Authorization: Bearer gpp_...' "
                           "(or 'Token gpp_...'). Scope read: GET only.",
        }

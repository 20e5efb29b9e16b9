"""``Authorization: Bearer <JWT>``: the provider's access tokens on the API (docs/identity.md).

The token is checked locally against the provider's cached keys (``tokens.access_token_verify``:
RS256 or ES256, ``aud`` holding ``GPUPORTAL_OIDC_AUDIENCE``, ``iss`` exact, times); no request goes
to the provider per call. Its subject must be an account that signed in to the portal through the
provider at least once (``ExternalIdentity``) and is active: the token then acts with that account's
roles, like a session. Any failure (bad signature, expired, unknown subject, provider unreachable)
is a 401 with the API's JSON error, never a 500.

A bearer value that is not a JWT (no two dots: a personal access token, a node token) is left to the
other authentication classes: ``authenticate`` returns ``None`` for it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from tenants.oidc.accounts import oidc_identity_user
from tenants.oidc.conf import oidc_config
from tenants.oidc.provider import ProviderUnavailable
from tenants.oidc.tokens import TokenInvalid, access_token_verify

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProviderAccessToken:
    """``request.auth`` for a request authenticated by the provider's access token."""

    claims: dict[str, Any]

    @property
    def scope(self) -> str:
        return "write"  # the account's roles decide, as with a session


class OidcBearerAuthentication(BaseAuthentication):
    keyword = b"bearer"

    def authenticate(self, request: Request) -> tuple[User, ProviderAccessToken] | None:
        parts = get_authorization_header(request).split()
        if len(parts) != 2 or parts[0].lower() != self.keyword or parts[1].count(b".") != 2:
            return None
        config = oidc_config()
        if config is None:
            return None
        try:
            token = parts[1].decode("ascii")
            claims = access_token_verify(token, config=config)
        except (UnicodeDecodeError, TokenInvalid) as exc:
            logger.info("provider access token refused: %s", exc)
            raise AuthenticationFailed("Invalid or expired token.") from None
        except ProviderUnavailable as exc:
            logger.warning("provider access token not checked, the provider is unreachable: %s", exc)
            raise AuthenticationFailed("The token cannot be checked now: the identity provider is unreachable.") from None
        user = oidc_identity_user(issuer=config.issuer, subject=str(claims["sub"]))
        if user is None:
            raise AuthenticationFailed("No active account for this token: sign in to the portal once first.")
        return user, ProviderAccessToken(claims=claims)

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class OidcBearerScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """The schema's name for the provider's access tokens (registered when this module is imported)."""

    target_class = OidcBearerAuthentication
    name = "oidcAccessToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                "description": "An access token of the OpenID Connect provider (docs/identity.md)."}

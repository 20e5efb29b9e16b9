"""mozilla-django-oidc's authentication backend, subclassed to close its gaps (docs/identity.md):

- endpoints come from the provider's discovery document (``provider``), not from settings;
- the ID token is checked by ``tokens.id_token_verify`` (RS256 only, ``iss`` exact, ``aud`` and
  ``azp``, times, nonce) against cached keys, where the library checks neither ``aud`` nor ``iss``;
- the account is found by (issuer, ``sub``), never by e-mail (``accounts.oidc_signin``);
- any failure (provider unreachable, bad token, deactivated account, a new account that could not
  be created) is audited and answered as "no user", never as an error page.

Django asks every backend about every ``authenticate()`` call: this one takes only the callback's
``nonce`` and ``code_verifier`` (so it never sees a password) and reads no setting and makes no
request before it is handed them.
"""

from __future__ import annotations

import logging
from typing import Any

import requests
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError
from django.http import HttpRequest
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from tenants.oidc.accounts import AccountRefused, oidc_signin, oidc_signin_failed
from tenants.oidc.conf import oidc_config
from tenants.oidc.library import library_setting
from tenants.oidc.provider import ProviderUnavailable, provider_metadata
from tenants.oidc.tokens import TokenInvalid, id_token_verify

logger = logging.getLogger(__name__)


class OidcBackend(OIDCAuthenticationBackend):  # type: ignore[misc]  # the library has no type hints
    get_settings = staticmethod(library_setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.UserModel = get_user_model()  # the endpoints are looked up when a callback comes

    def authenticate(
        self, request: HttpRequest | None, *, nonce: str | None, code_verifier: str | None
    ) -> AbstractBaseUser | None:
        config = oidc_config()
        if config is None or request is None:
            return None
        self.config = config
        try:
            metadata = provider_metadata(issuer=config.issuer, timeout=config.timeout)
            self.OIDC_OP_TOKEN_ENDPOINT = metadata["token_endpoint"]
            self.OIDC_OP_USER_ENDPOINT = metadata.get("userinfo_endpoint")
            self.OIDC_RP_CLIENT_ID = config.client_id
            self.OIDC_RP_CLIENT_SECRET = config.client_secret
            user: AbstractBaseUser | None = super().authenticate(request, nonce=nonce, code_verifier=code_verifier)
            return user
        except (ProviderUnavailable, requests.RequestException, ValueError, KeyError) as exc:
            logger.warning("OIDC sign-in failed: the provider: %s", exc)
            oidc_signin_failed(reason=f"provider: {exc}")
        except TokenInvalid as exc:
            logger.warning("OIDC sign-in refused: the ID token: %s", exc)
            oidc_signin_failed(reason=f"id token: {exc}")
        except AccountRefused as exc:
            oidc_signin_failed(reason=str(exc), subject=exc.subject)
        except IntegrityError as exc:  # a new account that kept colliding (accounts.oidc_signin retries first)
            logger.warning("OIDC sign-in failed: the account could not be created: %s", exc)
            oidc_signin_failed(reason="account: could not be created, try again")
        return None

    def verify_token(self, token: Any, **kwargs: Any) -> dict[str, Any]:
        if not isinstance(token, str):
            raise TokenInvalid("the token response has no ID token")
        return id_token_verify(token, config=self.config, nonce=kwargs.get("nonce"))

    def get_userinfo(self, access_token: Any, id_token: Any, payload: dict[str, Any]) -> dict[str, Any]:
        """The userinfo claims (some providers put the groups only there), for the ID token's subject."""
        if not self.OIDC_OP_USER_ENDPOINT or not access_token:
            return {}
        response = requests.get(
            self.OIDC_OP_USER_ENDPOINT, headers={"Authorization": f"Bearer {access_token}", "Accept": "application/json"},
            timeout=self.config.timeout, allow_redirects=False,
        )
        response.raise_for_status()
        claims = response.json()
        if not isinstance(claims, dict) or claims.get("sub") != payload["sub"]:
            raise TokenInvalid("the userinfo answer is about another subject")
        return claims

    def get_or_create_user(self, access_token: Any, id_token: Any, payload: dict[str, Any]) -> AbstractBaseUser:
        claims = {**self.get_userinfo(access_token, id_token, payload), **payload}  # the signed ID token wins
        return oidc_signin(issuer=self.config.issuer, claims=claims, groups_claim=self.config.groups_claim)

    def get_user(self, user_id: Any) -> AbstractBaseUser | None:
        return ModelBackend.get_user(self, user_id)  # a deactivated account's session ends (the library's does not)



"""mozilla-django-oidc reads its own ``OIDC_*`` settings; the portal's classes answer them from the
``GPUPORTAL_OIDC_*`` settings instead, so that there is one set of settings (docs/identity.md)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from mozilla_django_oidc.utils import import_from_settings

from tenants.oidc.conf import oidc_config

CALLBACK_URL_NAME = "oidc-callback"


def library_setting(attr: str, *default: Any) -> Any:
    config = oidc_config()
    fixed: dict[str, Any] = {
        "OIDC_USE_NONCE": True,
        "OIDC_USE_PKCE": True,
        "OIDC_PKCE_CODE_CHALLENGE_METHOD": "S256",
        "OIDC_PKCE_CODE_VERIFIER_SIZE": 64,
        "OIDC_STATE_SIZE": 32,
        "OIDC_NONCE_SIZE": 32,
        "OIDC_STORE_ID_TOKEN": True,  # for the provider's logout (id_token_hint)
        "OIDC_STORE_ACCESS_TOKEN": False,
        "OIDC_AUTHENTICATION_CALLBACK_URL": CALLBACK_URL_NAME,
        "OIDC_TOKEN_USE_BASIC_AUTH": False,
        "OIDC_VERIFY_SSL": True,
        "OIDC_PROXY": None,
        "OIDC_AUTH_REQUEST_EXTRA_PARAMS": {},
        "OIDC_RP_SIGN_ALGO": "RS256",
        "OIDC_ALLOW_UNSECURED_JWT": False,
        "LOGIN_REDIRECT_URL": settings.LOGIN_REDIRECT_URL,
    }
    if config is not None:
        fixed |= {"OIDC_RP_CLIENT_ID": config.client_id, "OIDC_RP_SCOPES": config.scopes, "OIDC_TIMEOUT": config.timeout}
    if attr in fixed:
        return fixed[attr]
    return import_from_settings(attr, *default)

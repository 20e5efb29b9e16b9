"""The OpenID Connect settings, read at call time (so ``override_settings`` applies)."""

from __future__ import annotations

from dataclasses import dataclass

from kernel.conf import setting, setting_bool, setting_float, setting_int, setting_optional_str


@dataclass(frozen=True)
class OidcConfig:
    issuer: str
    client_id: str
    client_secret: str | None
    name: str
    scopes: str
    groups_claim: str
    audience: str  # what an API access token's ``aud`` must hold
    timeout: float
    leeway: int


def oidc_config() -> OidcConfig | None:
    """The provider's settings, or ``None`` when OIDC sign-in is off (no issuer set)."""
    issuer = setting_optional_str("GPUPORTAL_OIDC_ISSUER")
    client_id = setting_optional_str("GPUPORTAL_OIDC_CLIENT_ID")
    if issuer is None or client_id is None:
        return None
    return OidcConfig(
        issuer=issuer,
        client_id=client_id,
        client_secret=setting_optional_str("GPUPORTAL_OIDC_CLIENT_SECRET"),
        name=setting_optional_str("GPUPORTAL_OIDC_NAME") or "single sign-on",
        scopes=str(setting("GPUPORTAL_OIDC_SCOPES")),
        groups_claim=setting_optional_str("GPUPORTAL_OIDC_GROUPS_CLAIM") or "groups",
        audience=setting_optional_str("GPUPORTAL_OIDC_AUDIENCE") or client_id,
        timeout=setting_float("GPUPORTAL_OIDC_TIMEOUT_SECONDS"),
        leeway=setting_int("GPUPORTAL_OIDC_LEEWAY_SECONDS"),
    )


def password_signin_enabled() -> bool:
    """Whether a username and password may sign in (the portal's form, the admin's, the token API)."""
    return setting_bool("GPUPORTAL_AUTH_PASSWORD")

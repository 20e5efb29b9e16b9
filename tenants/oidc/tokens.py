"""Checking the provider's tokens: an ID token at sign-in, an access token on the API.

Both are JWTs signed with one of the provider's keys (``provider.signing_key``): the algorithm comes
from an allow-list (RS256 for ID tokens; RS256 or ES256 for access tokens), never from the token
alone, so ``none`` and HMAC tokens are refused. ``iss`` must be exactly the configured issuer, ``aud``
must hold our client id (ID tokens) or ``GPUPORTAL_OIDC_AUDIENCE`` (access tokens), and ``exp``,
``iat`` and ``nbf`` are checked with ``GPUPORTAL_OIDC_LEEWAY_SECONDS`` of leeway.
"""

from __future__ import annotations

import hmac
from typing import Any

import jwt

from tenants.oidc.conf import OidcConfig
from tenants.oidc.provider import ProviderUnavailable, signing_key

ID_TOKEN_ALGORITHMS = ("RS256",)
ACCESS_TOKEN_ALGORITHMS = ("RS256", "ES256")
# An ID token is no API credential: Keycloak marks its ID tokens with ``typ: ID``, and RFC 9068 access
# tokens carry ``typ: at+jwt`` in the header.
_ACCESS_HEADER_TYPES = {None, "JWT", "at+jwt", "application/at+jwt"}
_ACCESS_CLAIM_TYPES = {None, "Bearer", "at+jwt"}


class TokenInvalid(Exception):
    """The token is not one the portal accepts (the message says why, for the logs)."""


def _decode(token: str, *, config: OidcConfig, audience: str, algorithms: tuple[str, ...]) -> dict[str, Any]:
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise TokenInvalid(f"not a JWT: {exc}") from None
    alg, kid = header.get("alg"), header.get("kid")
    if alg not in algorithms:
        raise TokenInvalid(f"algorithm {alg!r} is not accepted")
    if kid is not None and not isinstance(kid, str):
        raise TokenInvalid("the key id is not a string")
    try:
        key = signing_key(issuer=config.issuer, kid=kid, alg=str(alg), timeout=config.timeout)
    except LookupError as exc:
        raise TokenInvalid(str(exc)) from None
    try:
        claims = jwt.decode(
            token, key.key, algorithms=[str(alg)], audience=audience, issuer=config.issuer, leeway=config.leeway,
            options={"require": ["iss", "sub", "aud", "exp", "iat"]},
        )
    except jwt.PyJWTError as exc:
        raise TokenInvalid(str(exc)) from None
    if not isinstance(claims.get("sub"), str) or not claims["sub"]:
        raise TokenInvalid("the subject is missing")
    return claims


def id_token_verify(token: str, *, config: OidcConfig, nonce: str | None) -> dict[str, Any]:
    """The claims of an ID token from the code flow, whose ``nonce`` must be the one we sent."""
    claims = _decode(token, config=config, audience=config.client_id, algorithms=ID_TOKEN_ALGORITHMS)
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    azp = claims.get("azp")
    if (len(audiences) > 1 or azp is not None) and azp != config.client_id:
        raise TokenInvalid("the token was issued to another client (azp)")
    if not nonce or not hmac.compare_digest(str(claims.get("nonce", "")), nonce):
        raise TokenInvalid("the nonce does not match the one of the authorization request")
    return claims


def access_token_verify(token: str, *, config: OidcConfig) -> dict[str, Any]:
    """The claims of an access token meant for the portal's API."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise TokenInvalid(f"not a JWT: {exc}") from None
    if header.get("typ") not in _ACCESS_HEADER_TYPES:
        raise TokenInvalid(f"a token of type {header.get('typ')!r} is not an access token")
    claims = _decode(token, config=config, audience=config.audience, algorithms=ACCESS_TOKEN_ALGORITHMS)
    if claims.get("typ") not in _ACCESS_CLAIM_TYPES:
        raise TokenInvalid(f"a token of type {claims.get('typ')!r} is not an access token")
    return claims


__all__ = ["ProviderUnavailable", "TokenInvalid", "access_token_verify", "id_token_verify"]

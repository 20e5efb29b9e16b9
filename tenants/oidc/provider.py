"""The provider's discovery document and signing keys, fetched over HTTP and cached per process.

The discovery document (``<issuer>/.well-known/openid-configuration``) is kept for
``DISCOVERY_TTL`` seconds; its ``issuer`` must be exactly the configured one (OpenID Connect
Discovery §4.3). The signing keys (its ``jwks_uri``) are kept until a token names a key id the
cache does not hold: then they are fetched again, at most once per ``JWKS_MIN_REFRESH`` seconds, so
tokens with made-up key ids cannot make the portal hammer the provider. When a fetch fails, what
was cached before keeps serving; with nothing cached, ``ProviderUnavailable`` is raised.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import jwt
import requests

DISCOVERY_TTL = 3600.0
JWKS_MIN_REFRESH = 30.0
_SIGNING_KEY_TYPES = {"RS256": "RSA", "ES256": "EC"}


class ProviderUnavailable(Exception):
    """The provider could not be reached, or answered something that is not what it should."""


@dataclass
class _Entry:
    discovery: dict[str, Any] | None = None
    discovery_at: float = 0.0
    keys: list[jwt.PyJWK] = field(default_factory=list)
    keys_at: float = 0.0  # when the keys were last asked for (successfully or not)
    lock: threading.Lock = field(default_factory=threading.Lock)


_cache: dict[str, _Entry] = {}
_cache_lock = threading.Lock()


def _entry(issuer: str) -> _Entry:
    with _cache_lock:
        return _cache.setdefault(issuer, _Entry())


def provider_cache_clear() -> None:
    """Forget every provider's document and keys (tests; a changed configuration)."""
    with _cache_lock:
        _cache.clear()


def _get_json(url: str, *, timeout: float) -> dict[str, Any]:
    try:
        response = requests.get(url, timeout=timeout, allow_redirects=False, headers={"Accept": "application/json"})
        response.raise_for_status()
        body = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"{url}: {exc}") from None
    if not isinstance(body, dict):
        raise ProviderUnavailable(f"{url}: not a JSON object")
    return body


def provider_metadata(*, issuer: str, timeout: float) -> dict[str, Any]:
    """The provider's discovery document (cached)."""
    entry = _entry(issuer)
    with entry.lock:
        if entry.discovery is not None and time.monotonic() - entry.discovery_at < DISCOVERY_TTL:
            return entry.discovery
        try:
            document = _get_json(issuer.rstrip("/") + "/.well-known/openid-configuration", timeout=timeout)
            if document.get("issuer") != issuer:
                raise ProviderUnavailable(f"the discovery document names issuer {document.get('issuer')!r}, not {issuer!r}")
            for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
                if not isinstance(document.get(key), str):
                    raise ProviderUnavailable(f"the discovery document has no {key}")
        except ProviderUnavailable:
            if entry.discovery is not None:
                return entry.discovery  # stale beats nothing while the provider is away
            raise
        entry.discovery, entry.discovery_at = document, time.monotonic()
        return document


def _keys_fetch(*, jwks_uri: str, timeout: float) -> list[jwt.PyJWK]:
    document = _get_json(jwks_uri, timeout=timeout)
    keys: list[jwt.PyJWK] = []
    for data in document.get("keys") or []:
        if not isinstance(data, dict) or data.get("use", "sig") != "sig":
            continue
        try:
            keys.append(jwt.PyJWK(data))
        except (jwt.PyJWTError, ValueError, TypeError, KeyError):
            continue  # a key of a kind we do not use (or cannot read): not a signing key for us
    return keys


def _matching(keys: list[jwt.PyJWK], *, kid: str | None, alg: str) -> jwt.PyJWK | None:
    kty = _SIGNING_KEY_TYPES[alg]
    candidates = [
        key for key in keys
        if key.key_type == kty and key.algorithm_name == alg and (kid is None or key.key_id == kid)
    ]
    if kid is None and len(candidates) != 1:
        return None  # without a key id, only an unambiguous key will do
    return candidates[0] if candidates else None


def signing_key(*, issuer: str, kid: str | None, alg: str, timeout: float) -> jwt.PyJWK:
    """The provider's key ``kid`` for ``alg``; the keys are fetched again (rate-bounded) when unknown."""
    if alg not in _SIGNING_KEY_TYPES:
        raise ProviderUnavailable(f"algorithm {alg!r} is not accepted")
    entry = _entry(issuer)
    with entry.lock:
        found = _matching(entry.keys, kid=kid, alg=alg)
        if found is not None:
            return found
        if entry.keys_at and time.monotonic() - entry.keys_at < JWKS_MIN_REFRESH:
            raise LookupError(f"no signing key {kid!r} (the keys were fetched moments ago)")
    metadata = provider_metadata(issuer=issuer, timeout=timeout)
    with entry.lock:
        entry.keys_at = time.monotonic()
        entry.keys = _keys_fetch(jwks_uri=str(metadata["jwks_uri"]), timeout=timeout) or entry.keys
        found = _matching(entry.keys, kid=kid, alg=alg)
    if found is None:
        raise LookupError(f"the provider has no signing key {kid!r} for {alg}")
    return found

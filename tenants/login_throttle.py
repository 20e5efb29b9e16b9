"""Login throttling, the one mechanism for every way of signing in (the portal's login form and the
API's token endpoint): after too many failed attempts for one username, or from one address,
further attempts are refused for a while without checking the password.

Failures count together whichever way they were made, so the API is no way round the portal's
limit. Counts live in Django's cache. With the default per-process memory cache each web worker
counts on its own; configure a shared cache (Redis) in production so that the limit holds across
workers.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.core.cache import cache

WINDOW_SECONDS = 15 * 60
MAX_FAILURES_PER_USERNAME = 5
MAX_FAILURES_PER_ADDRESS = 30
USERNAME_MAX_LENGTH = 150


@dataclass(frozen=True)
class LoginThrottle:
    """The counts for one attempt: its username (case-insensitive) and its client address."""

    username: str
    address: str

    @classmethod
    def for_attempt(cls, *, username: str, address: str | None) -> LoginThrottle:
        return cls(username=username[:USERNAME_MAX_LENGTH], address=address or "")

    def _keys(self) -> list[tuple[str, int]]:
        user_digest = hashlib.sha256(self.username.strip().lower().encode()).hexdigest()[:32]
        address_digest = hashlib.sha256(self.address.encode()).hexdigest()[:32]
        return [
            (f"gpuportal:login-failures:user:{user_digest}", MAX_FAILURES_PER_USERNAME),
            (f"gpuportal:login-failures:addr:{address_digest}", MAX_FAILURES_PER_ADDRESS),
        ]

    def blocked(self) -> bool:
        return any(int(cache.get(key, 0)) >= limit for key, limit in self._keys())

    def failed(self) -> None:
        for key, _ in self._keys():
            if cache.add(key, 1, timeout=WINDOW_SECONDS):
                continue
            try:
                cache.incr(key)
            except ValueError:  # expired between add and incr
                cache.add(key, 1, timeout=WINDOW_SECONDS)

    def succeeded(self) -> None:
        """A correct password clears the username's count (not the address's)."""
        cache.delete(self._keys()[0][0])

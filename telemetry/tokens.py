"""Node agent tokens: ``gpn_<key id>_<secret>``.

The key id (16 hex digits) is public: it finds the token's row, which names the cluster and the
node. The secret (43 URL-safe characters, 256 random bits) is stored only as its SHA-256 digest
and compared in constant time. A fast hash is enough for a secret of that entropy: nothing about
it can be guessed, and a slow hash would cost every report of every node.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

PREFIX = "gpn"
_FORM = re.compile(r"^gpn_(?P<key_id>[0-9a-f]{16})_(?P<secret>[A-Za-z0-9_-]{43})$")


@dataclass(frozen=True)
class NewToken:
    key_id: str
    secret_hash: str
    text: str  # the whole token: shown once, never stored


def token_generate() -> NewToken:
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    return NewToken(key_id=key_id, secret_hash=secret_hash(secret), text=f"{PREFIX}_{key_id}_{secret}")


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def token_split(text: str) -> tuple[str, str] | None:
    """``(key id, secret)`` of a well-formed token, else None."""
    match = _FORM.match(text)
    if match is None:
        return None
    return match["key_id"], match["secret"]


def secret_matches(secret: str, stored_hash: str) -> bool:
    return hmac.compare_digest(secret_hash(secret), stored_hash)

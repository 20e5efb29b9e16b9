"""What an audit record may hold: no secrets, no control characters, only JSON-safe values."""

from __future__ import annotations

import datetime
import decimal
import hashlib
import math
import re
import uuid
from typing import Any

REDACTED = "[redacted]"
_SECRET_KEY = re.compile(r"pass(word|phrase)?|secret|token|kubeconfig|private|credential|api[_-]?key|cookie|session",
                         re.IGNORECASE)
_ALLOWED_KEY = re.compile(r"_(fingerprint|sha256|count)$")
_SECRET_VALUE = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----|^(Bearer|Token|Basic) \S+", re.IGNORECASE)
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
MAX_STRING = 4000


def escape_text(text: str, *, limit: int = MAX_STRING) -> str:
    """Escape control characters (CR, LF, ANSI escapes) so no log line or terminal can be forged."""
    escaped = _CONTROL_CHARACTERS.sub(lambda match: f"\\x{ord(match.group()):02x}", text)
    return escaped if len(escaped) <= limit else escaped[:limit] + "...[truncated]"


def secret_fingerprint(secret: str) -> str:
    """A short, non-reversible reference to a secret (for a ``token_fingerprint`` detail)."""
    return "sha256:" + hashlib.sha256(secret.encode("utf-8")).hexdigest()[:16]


def is_secret_key(key: str) -> bool:
    return _SECRET_KEY.search(key) is not None and _ALLOWED_KEY.search(key) is None


def scrub(value: Any) -> Any:
    """A JSON-safe copy of ``value`` with secrets redacted and control characters escaped."""
    if isinstance(value, dict):
        return {
            escape_text(str(key), limit=200): REDACTED if is_secret_key(str(key)) else scrub(inner)
            for key, inner in value.items()
        }
    if isinstance(value, (list, tuple, set, frozenset)):
        return [scrub(item) for item in value]
    if isinstance(value, str):
        return REDACTED if _SECRET_VALUE.search(value) else escape_text(value)
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    return escape_text(str(value))

"""Secrets never reach the logs.

Applied by both formatters to everything a record carries: the message with its arguments, the
extra fields (by key and by value, nested), the exception text and the stack. What is redacted:

- a value under a key that names a secret (``password``, ``pwd``, ``token``, ``secret``, ``authorization``,
  ``api_key``, ``cookie``, ``sessionid``, ``csrf…``, ``private_key``, ``kubeconfig``, the
  kubeconfig's ``client-key-data`` …), as an extra field or written in the text as ``key=value``,
  ``key: value``, ``"key": "value"`` (query strings, YAML, JSON, Python reprs);
- the credentials of an ``Authorization`` header and of the ``Bearer``/``Token``/``Basic`` schemes;
- the portal's tokens (``gpp_…``, ``gpn_…``) anywhere, their public prefix kept;
- the password of a URL (``postgres://user:[redacted]@host/db``);
- a PEM private key block.

A false positive costs a word of a log line; a false negative leaks a credential, so the patterns
lean towards redacting.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

REDACTED = "[redacted]"

# The names of secrets, not one.
_SECRET_WORDS = "|".join((
    r"passw(?:or)?d", "passphrase", "pwd", "secret", "token", r"api[_-]?key", r"access[_-]?key", r"private[_-]?key",
    "authorization", "cookie", r"session(?:id|_?key)?", r"csrf\w*", "credentials?", "kubeconfig", "client-key-data",
))
SECRET_KEY = re.compile(rf"(?:{_SECRET_WORDS})", re.IGNORECASE)

# key=value, key: value, "key": "value", 'key': 'value' where the key names a secret. Every
# repetition that could run over a long run of word characters (a base64 blob) is anchored to the
# start of a word and bounded, so that a record is redacted in time linear in its length.
_KEY_VALUE = re.compile(
    rf"""(?<![\w.-])(?P<key>["']?[\w.-]{{0,40}}?(?:{_SECRET_WORDS})[\w.-]{{0,40}}["']?)(?P<sep>\s*[:=]\s*)"""
    r"""(?P<value>\[redacted\]|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s"'&,;)}\]]+)""",
    re.IGNORECASE,
)
# An Authorization header written out, whatever its scheme.
_AUTHORIZATION = re.compile(
    r"(?P<key>\b(?:proxy-)?authorization\b[\"']?\s*[:=]\s*[\"']?)(?P<value>(?:[A-Za-z]+\s+)?[^\s\"',;]+)",
    re.IGNORECASE,
)
# A credential after its scheme, anywhere in the text (long enough not to be an ordinary word).
_SCHEME = re.compile(r"\b(?P<scheme>Bearer|Token|Basic)\s+(?P<value>[A-Za-z0-9._~+/=-]{16,})", re.IGNORECASE)
# The portal's own tokens wherever they appear, scheme or not: personal access tokens (gpp_) and node
# agent tokens (gpn_). The public prefix stays, so an operator can still tell which token it was.
_PORTAL_TOKEN = re.compile(r"\b(?P<prefix>gp[pn]_[A-Za-z0-9]{1,12})[A-Za-z0-9_-]{8,}")
_URL_PASSWORD = re.compile(
    r"(?<![a-z0-9+.-])(?P<head>[a-z][a-z0-9+.-]{0,30}://[^\s:/@]{1,256}:)(?P<value>[^\s@/]{1,256})(?P<tail>@)", re.IGNORECASE
)
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)", re.DOTALL)


def _quoted_redacted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return f"{value[0]}{REDACTED}{value[0]}"
    return REDACTED


def redact_text(text: str) -> str:
    """``text`` with every secret it shows replaced by ``[redacted]``."""
    if not text:
        return text
    text = _PRIVATE_KEY.sub("[redacted private key]", text)
    text = _PORTAL_TOKEN.sub(lambda match: f"{match['prefix']}{REDACTED}", text)
    text = _AUTHORIZATION.sub(lambda match: f"{match['key']}{REDACTED}", text)
    text = _SCHEME.sub(lambda match: f"{match['scheme']} {REDACTED}", text)
    text = _URL_PASSWORD.sub(lambda match: f"{match['head']}{REDACTED}{match['tail']}", text)

    def key_value(match: re.Match[str]) -> str:
        if match["value"].strip("\"'") == REDACTED:
            return match[0]
        return f"{match['key']}{match['sep']}{_quoted_redacted(match['value'])}"

    return _KEY_VALUE.sub(key_value, text)


def secret_key(key: object) -> bool:
    """Whether a field named ``key`` holds a secret (its value is then never written)."""
    return isinstance(key, str) and SECRET_KEY.search(key) is not None


def redact_value(value: Any, *, depth: int = 0) -> Any:
    """``value`` (a field of a record) with its secrets redacted: texts scanned, mappings by key too."""
    if depth > 8:
        return REDACTED if isinstance(value, (Mapping, list, tuple)) else value
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, bytes):
        return redact_text(value.decode("utf-8", "replace"))
    if isinstance(value, Mapping):
        return {
            key: (REDACTED if secret_key(key) and item is not None else redact_value(item, depth=depth + 1))
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple, set, frozenset)):
        return [redact_value(item, depth=depth + 1) for item in value]
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    return redact_text(str(value))

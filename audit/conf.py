"""The audit log's configuration: a Django setting of the same name wins over the environment.

=====================================  =========================================================
``GPUPORTAL_AUDIT_ORIGIN``             log name in checkpoints and key names (``gpuportal/audit``)
``GPUPORTAL_AUDIT_SIGNING_KEY``        Ed25519 private key, PEM or base64 seed; or ``..._FILE``.
                                       Required unless DEBUG (then a key is made in VAR_DIR).
``GPUPORTAL_AUDIT_TRUSTED_KEYS``       extra verifier keys (earlier keys after a rotation),
                                       comma- or newline-separated; or ``..._FILE``
``GPUPORTAL_AUDIT_CHECKPOINT_DIR``     external checkpoint folder (``VAR_DIR/audit-checkpoints``)
``GPUPORTAL_DB_RUNTIME_ROLE``          PostgreSQL role the application runs as; defaults to the
                                       user of ``GPUPORTAL_APP_DATABASE_URL``
``GPUPORTAL_DB_RUNTIME_GRANT_TRUNCATE`` also grant TRUNCATE on non-audit tables (test runs only)
=====================================  =========================================================
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from audit.integrity.keys import SigningKey, VerifierKey, signing_key_generate, signing_key_parse, verifier_key_parse
from audit.integrity.store import CheckpointFolder
from kernel.env import env_bool, env_secret, env_str

logger = logging.getLogger(__name__)

DEFAULT_ORIGIN = "gpuportal/audit"
DEV_KEY_NAME = "audit-signing-key.pem"


def _setting(name: str) -> object | None:
    return getattr(settings, name, None)


def audit_origin() -> str:
    value = _setting("GPUPORTAL_AUDIT_ORIGIN") or env_str("GPUPORTAL_AUDIT_ORIGIN", DEFAULT_ORIGIN)
    origin = str(value)
    if not origin or any(character.isspace() or character == "+" for character in origin):
        raise ImproperlyConfigured("GPUPORTAL_AUDIT_ORIGIN must be non-empty, without spaces or '+'")
    return origin


def _var_dir() -> Path:
    return Path(str(getattr(settings, "VAR_DIR", Path(settings.BASE_DIR) / "var")))


def audit_signing_key() -> SigningKey:
    """The checkpoint signing key. Never stored in the database."""
    text = _setting("GPUPORTAL_AUDIT_SIGNING_KEY") or env_secret("GPUPORTAL_AUDIT_SIGNING_KEY")
    origin = audit_origin()
    if text:
        try:
            return signing_key_parse(origin, str(text))
        except ValueError as error:
            raise ImproperlyConfigured(f"GPUPORTAL_AUDIT_SIGNING_KEY: {error}") from None
    if not settings.DEBUG:
        raise ImproperlyConfigured(
            "GPUPORTAL_AUDIT_SIGNING_KEY (or GPUPORTAL_AUDIT_SIGNING_KEY_FILE) must be set when GPUPORTAL_DEBUG is "
            "false: audit checkpoints cannot be signed"
        )
    return _development_key(origin)


def _development_key(origin: str) -> SigningKey:
    path = _var_dir() / DEV_KEY_NAME
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        key = signing_key_generate(origin)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(key.private_pem())
        logger.warning("generated a development audit signing key in %s (DEBUG only)", path)
    return signing_key_parse(origin, path.read_text())


def audit_trusted_keys() -> list[VerifierKey]:
    """Keys whose checkpoints are accepted: the current key plus earlier ones after a rotation."""
    keys = [audit_signing_key().verifier]
    raw = _setting("GPUPORTAL_AUDIT_TRUSTED_KEYS") or env_secret("GPUPORTAL_AUDIT_TRUSTED_KEYS") or ""
    items = raw if isinstance(raw, list | tuple) else str(raw).replace("\n", ",").split(",")
    for item in items:
        if str(item).strip():
            try:
                keys.append(verifier_key_parse(str(item)))
            except ValueError as error:
                raise ImproperlyConfigured(f"GPUPORTAL_AUDIT_TRUSTED_KEYS: {error}") from None
    return keys


def audit_checkpoint_folder() -> CheckpointFolder:
    value = _setting("GPUPORTAL_AUDIT_CHECKPOINT_DIR") or env_str("GPUPORTAL_AUDIT_CHECKPOINT_DIR")
    return CheckpointFolder(Path(str(value)) if value else _var_dir() / "audit-checkpoints")


def audit_runtime_role() -> str | None:
    """The PostgreSQL role the application runs as (granted INSERT and SELECT on the audit tables)."""
    value = _setting("GPUPORTAL_DB_RUNTIME_ROLE") or env_str("GPUPORTAL_DB_RUNTIME_ROLE")
    if value:
        return str(value)
    url = env_str("GPUPORTAL_APP_DATABASE_URL")
    if url:
        user = urlparse(url).username
        if not user:
            raise ImproperlyConfigured("GPUPORTAL_APP_DATABASE_URL has no user name")
        return unquote(user)
    return None


def audit_runtime_grant_truncate() -> bool:
    value = _setting("GPUPORTAL_DB_RUNTIME_GRANT_TRUNCATE")
    if value is not None:
        return bool(value)
    return env_bool("GPUPORTAL_DB_RUNTIME_GRANT_TRUNCATE", False)

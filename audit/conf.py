"""The audit log's configuration, read from the settings at call time.

The environment and the defaults are read in ``gpuportal/settings.py`` (README's configuration
table); this module checks and parses what the settings hold.

=====================================  =========================================================
``GPUPORTAL_AUDIT_ORIGIN``             log name in checkpoints and key names
``GPUPORTAL_AUDIT_SIGNING_KEY``        Ed25519 private key, PEM or base64 seed; or ``..._FILE``.
                                       Required unless DEBUG (then a key is made in VAR_DIR).
``GPUPORTAL_AUDIT_TRUSTED_KEYS``       extra verifier keys (earlier keys after a rotation),
                                       comma- or newline-separated; or ``..._FILE``
``GPUPORTAL_AUDIT_CHECKPOINT_DIR``     external checkpoint folder
``GPUPORTAL_AUDIT_CHECKPOINT_INTERVAL_SECONDS``
                                       the checkpoint heartbeat in seconds (the beat schedule's
                                       interval, default 60): events newer than the latest
                                       checkpoint are committed to nowhere for about this long
``GPUPORTAL_DB_RUNTIME_ROLE``          PostgreSQL role the application runs as; unset: the
                                       user of ``GPUPORTAL_APP_DATABASE_URL``
``GPUPORTAL_DB_RUNTIME_GRANT_TRUNCATE`` also grant TRUNCATE on non-audit tables (test runs only)
=====================================  =========================================================
"""

from __future__ import annotations

import logging
import os
from urllib.parse import unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

from audit.integrity.keys import SigningKey, VerifierKey, signing_key_generate, signing_key_parse, verifier_key_parse
from audit.integrity.store import CheckpointFolder
from kernel.conf import setting, setting_bool, setting_int, setting_optional_str, setting_path, setting_str

logger = logging.getLogger(__name__)

DEV_KEY_NAME = "audit-signing-key.pem"


def audit_origin() -> str:
    origin = setting_str("GPUPORTAL_AUDIT_ORIGIN")
    if not origin or any(character.isspace() or character == "+" for character in origin):
        raise ImproperlyConfigured("GPUPORTAL_AUDIT_ORIGIN must be non-empty, without spaces or '+'")
    return origin


def audit_signing_key() -> SigningKey:
    """The checkpoint signing key. Never stored in the database."""
    text = setting_optional_str("GPUPORTAL_AUDIT_SIGNING_KEY")
    origin = audit_origin()
    if text:
        try:
            return signing_key_parse(origin, text)
        except ValueError as error:
            raise ImproperlyConfigured(f"GPUPORTAL_AUDIT_SIGNING_KEY: {error}") from None
    if not setting_bool("DEBUG"):
        raise ImproperlyConfigured(
            "GPUPORTAL_AUDIT_SIGNING_KEY (or GPUPORTAL_AUDIT_SIGNING_KEY_FILE) must be set when GPUPORTAL_DEBUG is "
            "false: audit checkpoints cannot be signed"
        )
    return _development_key(origin)


def _development_key(origin: str) -> SigningKey:
    path = setting_path("VAR_DIR") / DEV_KEY_NAME
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
    raw = setting("GPUPORTAL_AUDIT_TRUSTED_KEYS") or ""
    items = raw if isinstance(raw, list | tuple) else str(raw).replace("\n", ",").split(",")
    for item in items:
        if str(item).strip():
            try:
                keys.append(verifier_key_parse(str(item)))
            except ValueError as error:
                raise ImproperlyConfigured(f"GPUPORTAL_AUDIT_TRUSTED_KEYS: {error}") from None
    return keys


def audit_checkpoint_folder() -> CheckpointFolder:
    return CheckpointFolder(setting_path("GPUPORTAL_AUDIT_CHECKPOINT_DIR"))


def audit_checkpoint_interval_seconds() -> int:
    """The heartbeat: beat publishes a checkpoint this often. Events newer than the latest
    checkpoint are committed to nowhere yet, so the database owner could remove them without a trace
    for at most about this long (plus one publishing run)."""
    seconds = setting_int("GPUPORTAL_AUDIT_CHECKPOINT_INTERVAL_SECONDS")
    if seconds < 1:
        raise ImproperlyConfigured("GPUPORTAL_AUDIT_CHECKPOINT_INTERVAL_SECONDS must be at least 1")
    return seconds


def audit_runtime_role() -> str | None:
    """The PostgreSQL role the application runs as (granted INSERT and SELECT on the audit tables)."""
    role = setting_optional_str("GPUPORTAL_DB_RUNTIME_ROLE")
    if role:
        return role
    url = setting_optional_str("GPUPORTAL_APP_DATABASE_URL")
    if url:
        user = urlparse(url).username
        if not user:
            raise ImproperlyConfigured("GPUPORTAL_APP_DATABASE_URL has no user name")
        return unquote(user)
    return None


def audit_runtime_grant_truncate() -> bool:
    return setting_bool("GPUPORTAL_DB_RUNTIME_GRANT_TRUNCATE")

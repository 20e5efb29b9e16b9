"""Settings of notifications, read at call time (their defaults are in ``gpuportal/settings.py``)."""

from __future__ import annotations

from django.conf import settings

from kernel.conf import setting, setting_float, setting_int, setting_optional_str, setting_str
from notifications import allowlist


def email_url() -> str | None:
    return setting_optional_str("GPUPORTAL_EMAIL_URL")


def email_enabled() -> bool:
    return email_url() is not None


def email_timeout_seconds() -> float:
    return setting_float("GPUPORTAL_EMAIL_TIMEOUT_SECONDS")


def email_from() -> str:
    return setting_str("GPUPORTAL_EMAIL_FROM")


def public_url() -> str | None:
    """The portal's address as people reach it (links in e-mails); None: mails carry paths only."""
    url = setting_optional_str("GPUPORTAL_PUBLIC_URL")
    return url.rstrip("/") if url else None


def platform_webhook_url() -> str | None:
    return setting_optional_str("GPUPORTAL_WEBHOOK_URL")


def platform_webhook_secret() -> str:
    return setting_optional_str("GPUPORTAL_WEBHOOK_SECRET") or ""


def platform_webhook_format() -> str:
    return setting_str("GPUPORTAL_WEBHOOK_FORMAT")


def webhook_allowed_hosts() -> list[str]:
    return [str(entry).strip().lower() for entry in setting("GPUPORTAL_WEBHOOK_ALLOWED_HOSTS") or [] if str(entry).strip()]


def webhook_allowed_entries() -> list[allowlist.Entry]:
    """The allow-list's entries (host pattern, plain http or not, port): ``notifications.allowlist``."""
    return allowlist.entries_parse(webhook_allowed_hosts())


def webhook_allowed_networks() -> list[allowlist.IPNetwork]:
    """Networks whose addresses webhooks may call although they are not global (loopback, private...)."""
    return allowlist.networks_parse(setting("GPUPORTAL_WEBHOOK_ALLOWED_NETWORKS") or [])


def webhook_ca_bundle() -> str | None:
    """The CA file of webhook calls named by the environment (REQUESTS_CA_BUNDLE, else SSL_CERT_FILE)."""
    return setting_optional_str("WEBHOOK_CA_BUNDLE")


def webhook_timeout_seconds() -> float:
    return setting_float("GPUPORTAL_WEBHOOK_TIMEOUT_SECONDS")


def max_attempts() -> int:
    return setting_int("GPUPORTAL_NOTIFY_MAX_ATTEMPTS")


def backoff_base_seconds() -> float:
    return setting_float("GPUPORTAL_NOTIFY_BACKOFF_BASE_SECONDS")


def backoff_max_seconds() -> float:
    return setting_float("GPUPORTAL_NOTIFY_BACKOFF_MAX_SECONDS")


def lease_seconds() -> float:
    return setting_float("GPUPORTAL_NOTIFY_LEASE_SECONDS")


def digest_hour() -> int:
    return setting_int("GPUPORTAL_NOTIFY_DIGEST_HOUR")


def encryption_keys() -> list[str]:
    """Keys for webhook URLs and secrets, newest first: ``GPUPORTAL_WEBHOOK_KEY``, else the
    kubeconfig key(s), else the secret key (each derived with its own label, kernel.sealing)."""
    for name in ("GPUPORTAL_WEBHOOK_KEY", "GPUPORTAL_KUBECONFIG_KEY"):
        value = setting_optional_str(name)
        if value:
            return [key.strip() for key in value.split(",") if key.strip()]
    return [str(settings.SECRET_KEY)]

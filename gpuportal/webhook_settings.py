"""The webhook and notification-delivery settings from the environment (docs/notifications.md),
checked when the settings load: an unknown webhook format or digest hour stops the start with a
clear message. The CA file of webhook calls is the one requests would use (``REQUESTS_CA_BUNDLE``,
else ``SSL_CERT_FILE``), read here as every variable is (tests/foundation/test_settings_sources.py)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured

from kernel.env import env_float, env_int, env_list, env_secret, env_str

WEBHOOK_FORMATS = ("json", "slack", "mattermost")


def webhook_settings() -> dict[str, Any]:
    values: dict[str, Any] = {
        "GPUPORTAL_WEBHOOK_URL": env_secret("GPUPORTAL_WEBHOOK_URL"),
        "GPUPORTAL_WEBHOOK_SECRET": env_secret("GPUPORTAL_WEBHOOK_SECRET"),
        "GPUPORTAL_WEBHOOK_FORMAT": env_str("GPUPORTAL_WEBHOOK_FORMAT", "json").lower(),
        "GPUPORTAL_WEBHOOK_ALLOWED_HOSTS": env_list("GPUPORTAL_WEBHOOK_ALLOWED_HOSTS", []),
        # CIDRs a department's webhook may call although not public (notifications/allowlist.py)
        "GPUPORTAL_WEBHOOK_ALLOWED_NETWORKS": env_list("GPUPORTAL_WEBHOOK_ALLOWED_NETWORKS", []),
        "GPUPORTAL_WEBHOOK_TIMEOUT_SECONDS": env_float("GPUPORTAL_WEBHOOK_TIMEOUT_SECONDS", 5.0),
        "WEBHOOK_CA_BUNDLE": env_str("REQUESTS_CA_BUNDLE") or env_str("SSL_CERT_FILE"),
        "GPUPORTAL_WEBHOOK_KEY": env_secret("GPUPORTAL_WEBHOOK_KEY"),
        "GPUPORTAL_NOTIFY_MAX_ATTEMPTS": env_int("GPUPORTAL_NOTIFY_MAX_ATTEMPTS", 8, minimum=1),
        "GPUPORTAL_NOTIFY_BACKOFF_BASE_SECONDS": env_float("GPUPORTAL_NOTIFY_BACKOFF_BASE_SECONDS", 30.0),
        "GPUPORTAL_NOTIFY_BACKOFF_MAX_SECONDS": env_float("GPUPORTAL_NOTIFY_BACKOFF_MAX_SECONDS", 3600.0),
        "GPUPORTAL_NOTIFY_LEASE_SECONDS": env_float("GPUPORTAL_NOTIFY_LEASE_SECONDS", 120.0),
        "GPUPORTAL_NOTIFY_DIGEST_HOUR": env_int("GPUPORTAL_NOTIFY_DIGEST_HOUR", 7, minimum=0),
    }
    if values["GPUPORTAL_WEBHOOK_FORMAT"] not in WEBHOOK_FORMATS:
        raise ImproperlyConfigured(
            f"GPUPORTAL_WEBHOOK_FORMAT must be json, slack or mattermost, got {values['GPUPORTAL_WEBHOOK_FORMAT']!r}"
        )
    if values["GPUPORTAL_NOTIFY_DIGEST_HOUR"] > 23:
        raise ImproperlyConfigured("GPUPORTAL_NOTIFY_DIGEST_HOUR must be an hour of the day in UTC, 0 to 23")
    return values

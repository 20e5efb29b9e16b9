from __future__ import annotations

import logging

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured


class NotificationsConfig(AppConfig):
    name = "notifications"
    label = "notifications"
    verbose_name = "Notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from notifications import conf

        try:  # [scheme://]host[:port] entries and CIDR networks (notifications/allowlist.py): refused at start
            conf.webhook_allowed_entries()
            conf.webhook_allowed_networks()
        except ValueError as error:
            raise ImproperlyConfigured(f"GPUPORTAL_WEBHOOK_ALLOWED_HOSTS / _NETWORKS: {error}") from None
        if not conf.email_enabled():
            logging.getLogger(__name__).info("e-mail notifications are off: GPUPORTAL_EMAIL_URL is not set")

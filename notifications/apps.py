from __future__ import annotations

import logging

from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    label = "notifications"
    verbose_name = "Notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from notifications import conf

        if not conf.email_enabled():
            logging.getLogger(__name__).info("e-mail notifications are off: GPUPORTAL_EMAIL_URL is not set")

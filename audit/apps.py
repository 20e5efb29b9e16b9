from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AuditConfig(AppConfig):
    name = "audit"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from audit import grants

        post_migrate.connect(grants.on_post_migrate, sender=self, dispatch_uid="audit.grants")

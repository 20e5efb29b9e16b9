from __future__ import annotations

from django.apps import AppConfig


class ComplianceConfig(AppConfig):
    name = "compliance"
    default_auto_field = "django.db.models.BigAutoField"

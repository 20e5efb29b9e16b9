from __future__ import annotations

from django.apps import AppConfig


class FrontendConfig(AppConfig):
    name = "frontend"
    default_auto_field = "django.db.models.BigAutoField"

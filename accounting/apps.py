from __future__ import annotations

from django.apps import AppConfig


class AccountingConfig(AppConfig):
    name = "accounting"
    label = "accounting"
    verbose_name = "Usage accounting"
    default_auto_field = "django.db.models.BigAutoField"

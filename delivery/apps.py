from __future__ import annotations

from django.apps import AppConfig


class DeliveryConfig(AppConfig):
    name = "delivery"
    default_auto_field = "django.db.models.BigAutoField"

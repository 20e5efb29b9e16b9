from __future__ import annotations

from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "telemetry"
    label = "telemetry"
    verbose_name = "Node telemetry"
    default_auto_field = "django.db.models.BigAutoField"

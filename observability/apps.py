from __future__ import annotations

from django.apps import AppConfig


class ObservabilityConfig(AppConfig):
    """The portal's own metrics (``/metrics``; docs/observability.md)."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "observability"
    label = "observability"
    verbose_name = "Observability"

    def ready(self) -> None:
        from observability.process import celery_signals_connect

        celery_signals_connect()

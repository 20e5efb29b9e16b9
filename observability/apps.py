from __future__ import annotations

from django.apps import AppConfig


class ObservabilityConfig(AppConfig):
    """The portal's own metrics (``/metrics``) and tracing (docs/observability.md)."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "observability"
    label = "observability"
    verbose_name = "Observability"

    def ready(self) -> None:
        from observability.process import celery_signals_connect
        from observability.tracing import tracing_configure

        celery_signals_connect()
        tracing_configure()  # only with an OTLP endpoint; before the first request builds the middleware

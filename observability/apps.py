from __future__ import annotations

from django.apps import AppConfig


class ObservabilityConfig(AppConfig):
    """The portal's own metrics (``/metrics``) and alert rules (docs/observability.md)."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "observability"
    verbose_name = "Observability"

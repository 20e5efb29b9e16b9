from __future__ import annotations

from django.apps import AppConfig


class DeliveryConfig(AppConfig):
    name = "delivery"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register the delivery tasks in every process, not only in workers (whose start-up
        # imports every app's tasks): ``clusters.outbox`` finds the push task by its name, and
        # in-process tasks (the embedded default) run it where the approval happened.
        from delivery import tasks  # noqa: F401

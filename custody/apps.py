from __future__ import annotations

from django.apps import AppConfig


class CustodyConfig(AppConfig):
    name = "custody"
    label = "custody"
    verbose_name = "GPU custody ledger"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from audit.schema import append_only_table_register
        from custody.schema import LEDGER_TABLE

        # The application's role gets SELECT and INSERT only on the ledger (audit.grants).
        append_only_table_register(LEDGER_TABLE)

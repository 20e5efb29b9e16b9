"""``manage.py audit_grants``: (re)apply the runtime role's privileges (run as the owner)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from audit.grants import runtime_grants_apply


class Command(BaseCommand):
    help = "Grant the runtime database role its privileges: INSERT and SELECT only on the audit tables."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--role", help="runtime role (default: GPUPORTAL_DB_RUNTIME_ROLE or the user of "
                                           "GPUPORTAL_APP_DATABASE_URL)")

    def handle(self, *args: Any, **options: Any) -> None:
        role = runtime_grants_apply(role=options["role"])
        if role is None:
            self.stdout.write("no runtime role configured, or not PostgreSQL: nothing to grant")
        else:
            self.stdout.write(
                f"granted {role}: INSERT and SELECT on the audit tables, nothing on the quarantine tables, read/write "
                "elsewhere"
            )

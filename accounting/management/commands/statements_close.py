"""``manage.py statements_close [--period YYYY-MM]``: close a month's statements now."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounting.statements import statements_close, statements_close_due
from kernel.errors import ApplicationError


class Command(BaseCommand):
    help = "Close the departments' statements of a month (default: last month, once its margin has passed)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--period", help="The month, YYYY-MM; it must have ended.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            closed = statements_close(period=options["period"]) if options["period"] else statements_close_due()
        except ValueError as error:
            raise CommandError(f"--period: {error}") from None
        except ApplicationError as error:
            raise CommandError(f"--period: {error.message}") from None
        for statement in closed:
            self.stdout.write(f"closed #{statement.pk} {statement.department.slug} {statement.currency} "
                              f"{statement.total} sha256 {statement.sha256}")  # fmt: skip
        self.stdout.write(f"{len(closed)} statement(s) closed")

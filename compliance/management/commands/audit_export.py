"""``manage.py audit_export``: stream an export (JSON Lines, CSV or a verifiable bundle)."""

from __future__ import annotations

import datetime
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from audit.actions import get_action
from audit.export import OUTPUTS, audit_export
from compliance.access import AuditVisibility, audit_filters_for


def _moment(value: str | None, name: str) -> datetime.datetime | None:
    if value is None:
        return None
    moment = parse_datetime(value)
    if moment is None or moment.tzinfo is None:
        raise CommandError(f"--{name} must be an ISO 8601 time with a time zone, e.g. 2026-01-31T00:00:00Z")
    return moment


class Command(BaseCommand):
    help = "Export audit events. Operators only: this command is not limited by any portal role."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--output", choices=OUTPUTS, default="bundle")
        parser.add_argument("--start", help="events at or after this time (ISO 8601)")
        parser.add_argument("--end", help="events before this time (ISO 8601)")
        parser.add_argument("--department", type=int, help="a department id (with its subtree)")
        parser.add_argument("--actor", help="username of the actor")
        parser.add_argument("--action", help="action code")
        parser.add_argument("--out", help="file to write (default: standard output)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"]:
            try:
                get_action(options["action"])
            except ValueError as error:
                raise CommandError(str(error)) from None
        filters = audit_filters_for(
            visibility=AuditVisibility(everything=True, department_ids=frozenset()),
            department_id=options["department"], time_from=_moment(options["start"], "start"),
            time_to=_moment(options["end"], "end"), actor=options["actor"], action=options["action"],
        )
        chunks = audit_export(filters=filters, output=options["output"])
        if options["out"]:
            with open(options["out"], "wb") as handle:
                for chunk in chunks:
                    handle.write(chunk)
        else:
            for chunk in chunks:
                sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()

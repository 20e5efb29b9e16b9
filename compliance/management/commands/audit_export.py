"""``manage.py audit_export``: stream an export (JSON Lines, CSV or a verifiable bundle).

Like a download from the API or the portal, every run is itself audited first: an
``audit.exported`` event with the output, the filters, ``"via": "cli"``, where it was written and
the operating-system user who ran it (the command has no portal user).
"""

from __future__ import annotations

import datetime
import getpass
import sys
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from audit.actions import get_action
from audit.checkpoints import AuditIntegrityError
from audit.export import OUTPUTS
from compliance.access import AuditVisibility, audit_filters_for
from compliance.exports import audit_export_stream


def _moment(value: str | None, name: str) -> datetime.datetime | None:
    if value is None:
        return None
    moment = parse_datetime(value)
    if moment is None or moment.tzinfo is None:
        raise CommandError(f"--{name} must be an ISO 8601 time with a time zone, e.g. 2026-01-31T00:00:00Z")
    return moment


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


class Command(BaseCommand):
    help = (
        "Export audit events. Operators only: this command is not limited by any portal role. Every run is recorded "
        "as an audit.exported event."
    )

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
        try:
            chunks = audit_export_stream(
                actor=None, filters=filters, output=options["output"], department_id=options["department"], via="cli",
                extra={"destination": options["out"] or "stdout", "os_user": _os_user()},
            )
        except AuditIntegrityError as error:  # the export stays recorded, as from the API
            raise CommandError(
                f"no checkpoint can be signed, so no bundle: {error} (manage.py audit_recover diagnoses it)",
                returncode=1,
            ) from None
        except ImproperlyConfigured as error:
            raise CommandError(f"audit checkpoints cannot be signed: {error}", returncode=1) from None
        if options["out"]:
            with open(options["out"], "wb") as handle:
                for chunk in chunks:
                    handle.write(chunk)
        else:
            for chunk in chunks:
                sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()

"""``manage.py usage_roll [--from ISO] [--to ISO]``: make the usage hours of a range again."""

from __future__ import annotations

import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from accounting.hours import hour_floor
from accounting.rolling import usage_hours_roll, usage_hours_roll_recent
from kernel.clock import clock_now

DAY = datetime.timedelta(days=1)


def _moment(text: str, option: str) -> datetime.datetime:
    moment = parse_datetime(text)
    if moment is None or moment.tzinfo is None:
        raise CommandError(f"{option}: not an ISO 8601 date-time with a time zone: {text!r}")
    return moment


class Command(BaseCommand):
    help = "Roll utilisation into GPU-equivalent-hours (UsageHour) for the UTC hours of a range, a day at a time."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--from", dest="start", help="First hour (ISO 8601); default: the late-data margin.")
        parser.add_argument("--to", dest="end", help="End, exclusive (ISO 8601); default: the current hour.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["start"] is None and options["end"] is None:
            outcome = usage_hours_roll_recent()
            self.stdout.write(
                f"rolled {outcome.hours} hour(s): {outcome.rows} row(s) for {outcome.allocations} allocation(s)"
            )
            return
        now = clock_now()
        end = hour_floor(_moment(options["end"], "--to")) if options["end"] else hour_floor(now)
        if options["start"] is None:
            raise CommandError("--from: needed with --to")
        start = hour_floor(_moment(options["start"], "--from"))
        if start >= end:
            raise CommandError("--to: must be at least an hour after --from")
        rows = hours = 0
        while start < end:
            outcome = usage_hours_roll(start=start, end=min(end, start + DAY), now=now)
            rows, hours, start = rows + outcome.rows, hours + outcome.hours, start + DAY
        self.stdout.write(f"rolled {hours} hour(s): {rows} row(s)")

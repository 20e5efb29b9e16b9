from __future__ import annotations

import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from allocations.windows.tick import LOOKBACK, quota_windows_tick


def moment(text: str) -> datetime.datetime:
    """An ISO 8601 time; without a zone it is UTC."""
    try:
        parsed = parse_datetime(text)
    except ValueError:
        parsed = None
    if parsed is None:
        raise CommandError(f"--at {text!r} is not an ISO 8601 time such as 2026-05-01T20:00:00+02:00")
    return parsed if timezone.is_aware(parsed) else parsed.replace(tzinfo=datetime.UTC)


class Command(BaseCommand):
    help = (
        "Apply the quota windows' edges that fell due (each once: a raise pushes to the clusters, a shrink follows "
        "its window's policy) and announce the shrinks coming within 30 minutes. The timeline task runs it every "
        "30 seconds; --at applies what is due at another time (a test, or catching up)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--at", type=moment, help="the time to apply the edges of (ISO 8601; default: now)")
        parser.add_argument(
            "--lookback", type=int, default=int(LOOKBACK.total_seconds() // 60),
            help="apply the edges of this many minutes before --at that were not applied yet (default: 60)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["lookback"] < 1:
            raise CommandError("--lookback must be at least 1 minute")
        result = quota_windows_tick(now=options["at"], lookback=datetime.timedelta(minutes=options["lookback"]))
        for edge in result.applied:
            self.stdout.write(edge.line())
        if not result.applied:
            self.stdout.write("nothing due")
        if result.warned:
            self.stdout.write(f"announced {result.warned} coming shrink(s)")

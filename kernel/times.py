"""Times as people and files read them: every date and time format of the portal, named once.

The portal writes times in UTC, to the minute (``2026-12-16 15:55 UTC``). The formats below are
``strftime`` formats (use them as ``f"{moment:{MINUTE}}"``); the ``TEMPLATE_`` ones are the same
formats as Django's ``date`` filter spells them, for the pages' filters (``frontend``'s
``to_minute``, ``to_second``, ``to_day``, ``to_month`` and ``to_iso``). A format written inline anywhere else
fails ``tests/architecture/test_one_rule.py``.
"""

from __future__ import annotations

import datetime

MINUTE = "%Y-%m-%d %H:%M"  # 2026-12-16 15:55: how texts write a time
SECOND = "%Y-%m-%d %H:%M:%S"
DAY = "%Y-%m-%d"
MONTH = "%Y-%m"
ISO_HOUR = "%Y-%m-%dT%H"
ISO_MINUTE = "%Y-%m-%dT%H:%M"  # what a datetime-local input holds
ISO_SECOND = "%Y-%m-%dT%H:%M:%S"
ISO_SECOND_Z = "%Y-%m-%dT%H:%M:%SZ"  # RFC 3339 in UTC, to the second
ISO_MICROSECOND_Z = "%Y-%m-%dT%H:%M:%S.%fZ"  # fixed width, so string order is time order
COMPACT_SECOND_Z = "%Y%m%dT%H%M%SZ"  # in a file name; RFC 5545's DATE-TIME in UTC (an RRULE's UNTIL)
COMPACT_SECOND = "%Y%m%dT%H%M%S"  # RFC 5545's floating DATE-TIME
COMPACT_DAY = "%Y%m%d"  # RFC 5545's DATE
CLOCK = "%H:%M"  # a chart's tick within a few days
DAY_OF_MONTH = "%d %b"  # a chart's tick beyond that: 16 Dec
WEEKDAY = "%a %d"  # a calendar's day: Wed 16

TEMPLATE_MINUTE = "Y-m-d H:i"  # MINUTE, as the date filter spells it
TEMPLATE_SECOND = "Y-m-d H:i:s"
TEMPLATE_DAY = "Y-m-d"
TEMPLATE_MONTH = "Y-m"
TEMPLATE_ISO = "c"  # ISO 8601, for a <time datetime="...">


def utc(moment: datetime.datetime) -> datetime.datetime:
    """An aware moment in UTC (a naive one as it is)."""
    return moment.astimezone(datetime.UTC) if moment.tzinfo is not None else moment


def minute_utc(moment: datetime.datetime) -> str:
    """``2026-12-16 15:55 UTC``: a moment as the portal's texts write it."""
    return f"{utc(moment):{MINUTE}} UTC"


def span_utc(start: datetime.datetime, end: datetime.datetime) -> str:
    """``2026-12-16 15:55 to 2026-12-18 09:00 UTC``."""
    return f"{utc(start):{MINUTE}} to {utc(end):{MINUTE}} UTC"


def time_readable(value: object) -> str:
    """An ISO timestamp as the portal writes times (``2026-12-16 15:55 UTC``); anything that is not
    an ISO time is shown as it is."""
    try:
        moment = datetime.datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    return minute_utc(moment)

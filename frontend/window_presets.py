"""The quota-window form's presets: ways to write a window's times without typing an RFC 5545
rule. A preset only writes the terms ``allocations.windows.services.quota_window_create`` takes
(its kind, rule, zone, duration, begin and end); the service checks them as it checks any other.

* Once (a festival, a deadline): from a date and time to another, in a chosen zone.
* Day/night: the same hours every chosen weekday (``FREQ=DAILY;BYHOUR=20;BYMINUTE=0``, or
  ``FREQ=WEEKLY;BYDAY=MO,TU;...`` for some weekdays), from a first day to an optional last day;
  an end at or before the start runs past midnight (20:00 to 08:00 is 12 hours).
* Advanced: the rule itself, for the rules no preset writes.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from allocations.models.windows import WindowKind
from allocations.windows.services import time_zones

ONCE = WindowKind.TEMPORARY
DAILY = "daily"
ADVANCED = WindowKind.RECURRING
PRESETS = (
    (ONCE, "Once: from a date and time to another (a festival, a deadline)"),
    (DAILY, "Day/night: the same hours on chosen weekdays"),
    (ADVANCED, "Advanced: write the rule (RRULE) yourself"),
)
WEEKDAYS = (("MO", "Mon"), ("TU", "Tue"), ("WE", "Wed"), ("TH", "Thu"), ("FR", "Fri"), ("SA", "Sat"), ("SU", "Sun"))
COMMON_ZONES = (
    "UTC", "Europe/London", "Europe/Berlin", "Europe/Paris", "Europe/Zurich", "Europe/Stockholm", "America/New_York",
    "America/Chicago", "America/Denver", "America/Los_Angeles", "America/Sao_Paulo", "Asia/Kolkata", "Asia/Shanghai",
    "Asia/Singapore", "Asia/Tokyo", "Asia/Seoul", "Australia/Sydney",
)
DAY_MINUTES = 24 * 60


def zone_choices() -> list[tuple[str, object]]:
    """The zones a window may follow (zoneinfo's), the common ones first, then every other A to Z."""
    known = time_zones()
    common = [zone for zone in COMMON_ZONES if zone in known]
    others = sorted(known - set(common))
    return [("", "Choose a time zone"), ("Common", [(zone, zone) for zone in common]),
            ("All zones", [(zone, zone) for zone in others])]


def in_zone(moment: datetime.datetime, zone: str) -> datetime.datetime:
    """The wall time typed into a form (parsed as UTC by Django) read in ``zone``, as an aware UTC time."""
    wall = moment.replace(tzinfo=None)
    return wall.replace(tzinfo=ZoneInfo(zone or "UTC")).astimezone(datetime.UTC)


def day_start(day: datetime.date, zone: str) -> datetime.datetime:
    """Midnight at the start of ``day`` in ``zone``, in UTC."""
    return datetime.datetime.combine(day, datetime.time(), tzinfo=ZoneInfo(zone)).astimezone(datetime.UTC)


@dataclass(frozen=True)
class DailyTerms:
    """What a day/night preset writes."""

    rrule: str
    duration_minutes: int


def daily_rule(*, starts: datetime.time, weekdays: list[str]) -> str:
    """``FREQ=DAILY;BYHOUR=20;BYMINUTE=0``, or weekly on the weekdays chosen when not all seven are."""
    chosen = [code for code, _label in WEEKDAYS if code in weekdays]
    hours = f"BYHOUR={starts.hour};BYMINUTE={starts.minute}"
    if len(chosen) == len(WEEKDAYS):
        return f"FREQ=DAILY;{hours}"
    return f"FREQ=WEEKLY;BYDAY={','.join(chosen)};{hours}"


def daily_minutes(*, starts: datetime.time, ends: datetime.time) -> int:
    """Minutes from ``starts`` to ``ends``, past midnight when ``ends`` is not later (0: the same time)."""
    return (ends.hour * 60 + ends.minute - starts.hour * 60 - starts.minute) % DAY_MINUTES


def daily_terms(*, starts: datetime.time, ends: datetime.time, weekdays: list[str]) -> DailyTerms:
    return DailyTerms(rrule=daily_rule(starts=starts, weekdays=weekdays),
                      duration_minutes=daily_minutes(starts=starts, ends=ends))

"""RRULE text read into dateutil's rules, pure (``allocations.quotas.windows`` evaluates them): what
RFC 5545 allows and dateutil would loop on refused, a rule read once per process (cached), a UTC
UNTIL as the zone's wall time, and a rule's start moved forward by whole periods (the same
occurrences from there on). No database access."""

from __future__ import annotations

import calendar
import datetime
import re
from dataclasses import dataclass
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dateutil.rrule import rrule, rrulestr

from kernel.times import COMPACT_SECOND_Z

UTC = datetime.UTC
_FIXED_PERIODS = {"DAILY": datetime.timedelta(days=1), "WEEKLY": datetime.timedelta(days=7),
                  "HOURLY": datetime.timedelta(hours=1), "MINUTELY": datetime.timedelta(minutes=1),
                  "SECONDLY": datetime.timedelta(seconds=1)}
_MONTH_PERIODS = {"MONTHLY": 1, "YEARLY": 12}
_RANGES = {"BYMONTH": (1, 12, False), "BYMONTHDAY": (1, 31, True), "BYYEARDAY": (1, 366, True),
           "BYWEEKNO": (1, 53, True)}  # RFC 5545 3.3.10: (least, most, negatives counted from the end too)
_WEEKDAY = re.compile(r"^([+-]?)(\d{1,2})?(MO|TU|WE|TH|FR|SA|SU)$")
_UTC_UNTIL = re.compile(r"^\d{8}T\d{6}Z$")
_LOCAL_UNTIL = re.compile(r"^\d{8}(T\d{6})?$")
MAX_INTERVAL = 100000


@dataclass(frozen=True)
class _Compiled:
    """An RRULE checked once: the text dateutil reads (without a UTC UNTIL), that UNTIL, and what
    moving its start forward needs."""

    body: str
    until_utc: datetime.datetime | None
    freq: str
    interval: int
    counted: bool


def _aware(moment: datetime.datetime) -> datetime.datetime:
    if moment.tzinfo is None:
        raise ValueError("quota window times must be timezone-aware")
    return moment.astimezone(UTC)


@lru_cache(maxsize=1024)
def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as error:  # not found, a bad key, a directory
        raise ValueError(f"unknown time zone {name!r}") from error


def _numbers(name: str, value: str) -> list[int]:
    try:
        return [int(item) for item in value.split(",")]
    except ValueError:
        raise ValueError(f"{name} takes whole numbers separated by commas") from None


def _check_parts(parts: dict[str, str]) -> None:
    """What dateutil accepts but RFC 5545 does not, or would make it loop forever or fail later."""
    if "FREQ" not in parts:
        raise ValueError("FREQ is required")
    if "COUNT" in parts and "UNTIL" in parts:
        raise ValueError("COUNT and UNTIL exclude each other (RFC 5545)")
    for name in ("INTERVAL", "COUNT"):
        if name in parts and not (parts[name].isdigit() and 1 <= int(parts[name]) <= MAX_INTERVAL):
            raise ValueError(f"{name} must be a whole number from 1 to {MAX_INTERVAL}")
    for name, (least, most, negative) in _RANGES.items():
        for n in _numbers(name, parts[name]) if name in parts else []:
            if not (least <= n <= most or (negative and -most <= n <= -least)):
                raise ValueError(f"{name} values lie within {'+/-' if negative else ''}{least}..{most}")
    most = {"MONTHLY": 5, "YEARLY": 53}.get(parts["FREQ"], 0)  # an ordinal only in a monthly or yearly rule
    for day in parts["BYDAY"].split(",") if "BYDAY" in parts else []:
        found = _WEEKDAY.match(day)
        if found is None or (found[2] is not None and not 1 <= int(found[2]) <= most):
            raise ValueError(f"BYDAY {day!r}: a weekday (MO..SU)"
                             + (f", optionally after an ordinal within +/-1..{most}" if most else ""))
        if found[1] and found[2] is None:
            raise ValueError(f"BYDAY {day!r}: a sign needs an ordinal")
    days = parts["BYDAY"].split(",") if "BYDAY" in parts else []
    if most and len({day[-2:] == day for day in days}) > 1:  # dateutil would want both at once: no day
        raise ValueError("BYDAY: give plain weekdays (MO,FR) or ordinal ones (1MO,-1FR), not both")
    until = parts.get("UNTIL")
    if until is not None and not (_UTC_UNTIL.match(until) or _LOCAL_UNTIL.match(until)):
        raise ValueError("UNTIL is a date (YYYYMMDD) or a date and time (YYYYMMDDTHHMMSS, Z for UTC)")


@lru_cache(maxsize=4096)
def _compile(text: str) -> _Compiled:
    body = text.strip()
    if body.upper().startswith("RRULE:"):
        body = body[len("RRULE:"):]
    if not body or "\n" in body or "\r" in body or "DTSTART" in body.upper():
        raise ValueError("give one RRULE line without DTSTART (the window's begins_at is its start)")
    parts: dict[str, str] = {}
    for part in body.split(";"):
        name, sign, value = part.partition("=")
        name, value = name.strip().upper(), value.strip().upper()
        if not sign or not name or not value:
            raise ValueError(f"{part!r} is not NAME=VALUE")
        if name in parts:
            raise ValueError(f"{name} is given twice")
        parts[name] = value
    _check_parts(parts)
    until_utc = None
    if _UTC_UNTIL.match(parts.get("UNTIL", "")):
        until_utc = datetime.datetime.strptime(parts.pop("UNTIL"), COMPACT_SECOND_Z).replace(tzinfo=UTC)
    return _Compiled(";".join(f"{name}={value}" for name, value in parts.items()), until_utc, parts["FREQ"],
                     int(parts.get("INTERVAL", "1")), "COUNT" in parts)


@lru_cache(maxsize=16384)
def _rule(body: str, dtstart_local: datetime.datetime, until_local: datetime.datetime | None) -> rrule:
    try:
        parsed = rrulestr(body, dtstart=dtstart_local, forceset=False)
        if not isinstance(parsed, rrule):  # pragma: no cover - forceset=False and one RRULE give an rrule
            raise ValueError("one RRULE expected")
        return parsed.replace(until=until_local) if until_local is not None else parsed
    except (ValueError, TypeError, KeyError, IndexError, OverflowError) as error:
        raise ValueError(f"not a valid RRULE: {error}") from error


def _local(moment: datetime.datetime, tz: ZoneInfo) -> datetime.datetime:
    return moment.astimezone(tz).replace(tzinfo=None)


def _instant(wall: datetime.datetime, tz: ZoneInfo) -> datetime.datetime:
    return wall.replace(tzinfo=tz).astimezone(UTC)  # fold=0: a repeated time's first pass


def parse_rrule(text: str, *, zone: str, begins_at: datetime.datetime) -> rrule:
    """The RRULE of a recurring window, its DTSTART the window's start in its zone (naive local wall
    times, a UTC UNTIL turned into the zone's wall time); raises ``ValueError`` when it cannot be
    read, when it breaks RFC 5545 (COUNT with UNTIL, INTERVAL below 1, BY* values out of range) or
    when the zone is unknown. Cheap: it does not look for an occurrence."""
    tz = _zone(zone)
    compiled = _compile(text)
    until = _local(compiled.until_utc, tz) if compiled.until_utc is not None else None
    return _rule(compiled.body, _local(_aware(begins_at), tz), until)


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; ``ValueError`` when unknown."""
    return _zone(name)


def first_starts(
    text: str, *, zone: str, begins_at: datetime.datetime, within: datetime.timedelta, most: int
) -> list[datetime.datetime]:
    """The rule's starts (local wall times) from ``begins_at`` to ``within`` after it, at most
    ``most + 1`` of them (more than ``most``: the rule has more): a bounded walk."""
    rule = parse_rrule(text, zone=zone, begins_at=begins_at)
    high = _local(_aware(begins_at), _zone(zone)) + within
    out: list[datetime.datetime] = []
    for wall in rule:
        if wall > high or len(out) > most:
            break
        out.append(wall)
    return out


def _forward(compiled: _Compiled, dtstart: datetime.datetime, before: datetime.datetime) -> datetime.datetime:
    """A start at least one period before ``before``, a whole number of the rule's periods after
    ``dtstart``, with the same time of day, weekday (weekly) and day of month (monthly, yearly):
    dateutil fills what the rule leaves out from its start and lays its periods from it, so the rule
    gives from there on the very occurrences it gives from ``dtstart``. Not with COUNT."""
    if compiled.counted or before <= dtstart:
        return dtstart
    if compiled.freq in _FIXED_PERIODS:
        period = _FIXED_PERIODS[compiled.freq] * compiled.interval
        periods = (before - dtstart) // period - 1
        return dtstart + period * periods if periods > 0 else dtstart
    months = _MONTH_PERIODS[compiled.freq] * compiled.interval
    periods = ((before.year - dtstart.year) * 12 + before.month - dtstart.month) // months - 1
    for back in range(periods, max(periods - 48, 0), -1):  # a day 29-31 that the month lacks: go back
        index = dtstart.month - 1 + back * months
        year, month = dtstart.year + index // 12, index % 12 + 1
        if year <= datetime.MAXYEAR and dtstart.day <= calendar.monthrange(year, month)[1]:
            return dtstart.replace(year=year, month=month)
    return dtstart

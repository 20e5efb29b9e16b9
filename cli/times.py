"""Times on the command line: ISO 8601 (``2026-12-24``, ``2026-12-24T09:00``, with or without an
offset; without one it is local time), ``now``, or an offset from now (``+90m``, ``+12h``, ``+7d``,
``+2w``). Sent to the API as ISO 8601 with an offset."""

from __future__ import annotations

import datetime
import re
from typing import Any

import click

_RELATIVE = re.compile(r"^\+(\d+)([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_time(text: str, *, now: datetime.datetime | None = None) -> datetime.datetime:
    now = now or datetime.datetime.now(datetime.UTC)
    value = text.strip().lower()
    if value == "now":
        return now
    match = _RELATIVE.match(value)
    if match:
        return now + datetime.timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a time: use ISO 8601 (2026-12-24T09:00), now, or +30m/+12h/+7d/+2w") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time, as a person typing it means
    return moment


class TimeType(click.ParamType[datetime.datetime, Any]):
    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime.datetime:
        if isinstance(value, datetime.datetime):
            return value
        try:
            return parse_time(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


TIME = TimeType()

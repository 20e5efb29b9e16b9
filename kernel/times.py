"""Times as people read them in the portal's texts: UTC, to the minute."""

from __future__ import annotations

import datetime


def time_readable(value: object) -> str:
    """An ISO timestamp as the portal writes times (``2026-12-16 15:55 UTC``); anything that is not
    an ISO time is shown as it is."""
    try:
        moment = datetime.datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.UTC)
    return f"{moment:%Y-%m-%d %H:%M} UTC"

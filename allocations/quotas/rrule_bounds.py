"""Bounds on a recurring quota window's RRULE, so that no rule a department admin may ask for can
make the portal slow (docs/quotas.md, "Bounds on a rule"; docs/security.md). Checked by
``allocations.windows.services.rrule_check``, the one place every new window passes (the API, the
portal's form; the Django admin creates none), each refusal a ``FieldError`` on ``rrule`` that
states the bound:

* at most ``GPUPORTAL_WINDOW_RRULE_MAX_LENGTH`` characters;
* occurrences at least ``GPUPORTAL_WINDOW_RRULE_MIN_INTERVAL_MINUTES`` apart: the times of day that
  BYHOUR, BYMINUTE and BYSECOND make (their product) are at most a day's worth at that spacing and
  that far apart, read from the text before any occurrence is looked for, and no two starts of the
  rule's first 366 days come closer (in its zone's wall time);
* at most ``GPUPORTAL_WINDOW_RRULE_MAX_EDGES`` edges within its first 366 days, each occurrence
  counted with its begin and end (before overlapping occurrences merge: what an evaluation walks).

Evaluating the check walks at most the edges' bound of starts (a budget), never the rule's whole
horizon. Rules stored before these bounds stay as they are: every evaluation of a rule has its own
budget (``allocations.quotas.windows``), so a stored one that breaks them stays readable and fast.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass

from django.conf import settings

from allocations.quotas import rrules
from kernel.errors import FieldError
from kernel.times import SECOND

YEAR = datetime.timedelta(days=366)
DAY_SECONDS = 24 * 60 * 60


@dataclass(frozen=True)
class RruleBounds:
    max_length: int
    min_interval_minutes: int
    max_edges: int  # within 366 days

    @property
    def max_occurrences(self) -> int:
        return self.max_edges // 2


def rrule_bounds() -> RruleBounds:
    """The bounds in force (settings, read each time: tests and operators may change them)."""
    return RruleBounds(
        max_length=settings.GPUPORTAL_WINDOW_RRULE_MAX_LENGTH,
        min_interval_minutes=settings.GPUPORTAL_WINDOW_RRULE_MIN_INTERVAL_MINUTES,
        max_edges=settings.GPUPORTAL_WINDOW_RRULE_MAX_EDGES,
    )


def rrule_length_check(text: str) -> None:
    most = rrule_bounds().max_length
    if len(text) > most:
        raise FieldError("rrule", f"A rule has at most {most} characters (this one has {len(text)}).")


def _parts(text: str) -> dict[str, str]:
    body = text.strip().upper().removeprefix("RRULE:")
    return {name.strip(): value.strip() for name, _, value in (part.partition("=") for part in body.split(";"))}


def _values(parts: dict[str, str], name: str, default: int) -> list[int]:
    """The whole numbers a BY part lists (its default when absent; unreadable ones are dropped:
    the RRULE check proper refuses them)."""
    if name not in parts:
        return [default]
    out = []
    for item in parts[name].split(","):
        try:
            out.append(int(item))
        except ValueError:
            continue
    return sorted(set(out)) or [default]


def _spacing_check(parts: dict[str, str], *, begins_local: datetime.datetime, bounds: RruleBounds) -> None:
    """The times of day BYHOUR × BYMINUTE × BYSECOND make: few enough, and far enough apart, read
    from the text alone (a day of a hostile rule costs its evaluator as many steps as it has times)."""
    hours = _values(parts, "BYHOUR", begins_local.hour)
    minutes = _values(parts, "BYMINUTE", begins_local.minute)
    seconds = _values(parts, "BYSECOND", begins_local.second)
    gap = bounds.min_interval_minutes
    most = max(1, DAY_SECONDS // (gap * 60))
    count = len(hours) * len(minutes) * len(seconds)
    if count > most:
        raise FieldError(
            "rrule", f"Occurrences must be at least {gap} minutes apart: at most {most} times a day, and BYHOUR, "
            f"BYMINUTE and BYSECOND make {count}.",
        )
    times = sorted(h * 3600 + m * 60 + s for h in hours for m in minutes for s in seconds)
    closest = min((b - a for a, b in zip(times, times[1:], strict=False)), default=math.inf)
    if closest < gap * 60:
        raise FieldError(
            "rrule", f"Occurrences must be at least {gap} minutes apart; BYHOUR, BYMINUTE and BYSECOND put two "
            f"{closest / 60:g} minutes apart.",
        )


def rrule_density_check(text: str, *, zone: str, begins_at: datetime.datetime) -> None:
    """Refuse (``FieldError`` on ``rrule``) a readable rule whose occurrences come closer than the
    minimum interval or whose first 366 days have more edges than the bound; at most the bound's
    worth of starts are looked at."""
    bounds = rrule_bounds()
    begins_local = begins_at.astimezone(rrules.zone(zone)).replace(tzinfo=None)
    _spacing_check(_parts(text), begins_local=begins_local, bounds=bounds)
    starts = rrules.first_starts(text, zone=zone, begins_at=begins_at, within=YEAR, most=bounds.max_occurrences)
    if len(starts) > bounds.max_occurrences:
        raise FieldError(
            "rrule", f"At most {bounds.max_edges} edges (begins and ends) within 366 days, {bounds.max_occurrences} "
            f"occurrences; this rule has more within its first 366 days.",
        )
    gap = datetime.timedelta(minutes=bounds.min_interval_minutes)
    for earlier, later in zip(starts, starts[1:], strict=False):
        if later - earlier < gap:
            raise FieldError(
                "rrule", f"Occurrences must be at least {bounds.min_interval_minutes} minutes apart; two start at "
                f"{earlier:{SECOND}} and {later:{SECOND}} ({zone}).",
            )

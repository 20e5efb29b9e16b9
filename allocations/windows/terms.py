"""What a quota window asks for, as one value: when it is in force and what it does to the quota
while it is. ``quota_window_create`` takes it; the API, the portal's form and the demo build it."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from decimal import Decimal

from allocations.models.windows import ShrinkPolicy


@dataclass(frozen=True)
class WindowTerms:
    """A window's terms, unchecked (``quota_window_create`` checks them, a 400 naming the field).

    When: ``kind`` (temporary or recurring) from ``begins_at``; a temporary window until
    ``ends_at``, a recurring one by its ``rrule`` in its IANA ``timezone``, each occurrence
    ``duration_minutes`` long, none starting at or after ``ends_at`` if given. What: at least one of
    the four values, a field's delta or its absolute value; ``priority_class_id`` narrows it to one
    priority class; ``shrink_policy`` says what happens to grants a shrink leaves over the quota."""

    kind: str
    begins_at: datetime.datetime
    ends_at: datetime.datetime | None = None
    rrule: str = ""
    timezone: str = ""
    duration_minutes: int | None = None
    guaranteed_delta: Decimal | None = None
    limit_delta: Decimal | None = None
    guaranteed: Decimal | None = None
    limit: Decimal | None = None
    priority_class_id: int | None = None
    shrink_policy: str = ShrinkPolicy.WAIT

    def values(self) -> dict[str, Decimal | None]:
        """The four values by name (``VALUE_FIELDS``), None where not given."""
        return {"guaranteed_delta": self.guaranteed_delta, "limit_delta": self.limit_delta,
                "guaranteed": self.guaranteed, "limit": self.limit}

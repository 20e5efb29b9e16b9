"""A quota refusal that a quota window would lift: the limit admission refused with is the one the
request meets outside an approved window of that same quota that raises it, and the window's
next occurrence is ahead. The numbers stay admission's (the refusal's details); this adds which
window and when it next begins."""

from __future__ import annotations

import datetime

from allocations.admission.reasons import Reason, ReasonCode
from allocations.admission.why_estimate import HORIZON
from allocations.models import Allocation, Quota, QuotaWindow, WindowState
from allocations.quotas import windows
from allocations.quotas.window_reading import window_spec


def outside_window(primary: Reason, *, allocation: Allocation, now: datetime.datetime) -> Reason | None:
    """``primary`` (a quota refusal at a department) as ``outside-window`` when a window of the
    refusing quota raises its limit and next begins within the horizon; else None."""
    facts = primary.facts
    if facts.get("level") != "department" or facts.get("priority_class"):
        return None
    quota = Quota.objects.filter(department__slug=facts.get("department"),
                                 flavor__name=facts.get("flavor")) if facts.get("flavor") else Quota.objects.filter(
        department__slug=facts.get("department"), flavor=None)
    found = quota.first()
    if found is None:
        return None
    after = max(now, allocation.starts_at)
    for row in QuotaWindow.objects.filter(quota=found, state=WindowState.APPROVED, priority_class=None).order_by("pk"):
        spec = window_spec(row)
        if not spec.sets("limit") or spec.applied_to("limit", found.limit) <= found.limit:
            continue
        begins = [edge for edge in windows.next_edges(spec, after, count=4, within=HORIZON) if edge.kind == "begin"]
        if begins:
            return Reason(ReasonCode.OUTSIDE_WINDOW, f"{primary.text} Quota window #{row.pk} raises this limit to "
                          f"{spec.applied_to('limit', found.limit).normalize()} from {begins[0].at.isoformat()}.",
                          {**facts, "window": row.pk, "window_from": begins[0].at.isoformat(),
                           "window_limit": str(spec.applied_to("limit", found.limit).normalize())})
    return None

"""Quota windows read from the database into the pure :mod:`allocations.quotas.windows`."""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Iterable

from allocations.models.windows import QuotaWindow, WindowState
from allocations.quotas.windows import WindowSpec


def window_spec(row: QuotaWindow) -> WindowSpec:
    return WindowSpec(
        id=row.pk,
        kind=row.kind,
        begins_at=row.begins_at,
        ends_at=row.ends_at,
        rrule=row.rrule,
        timezone=row.timezone or "UTC",
        duration=datetime.timedelta(minutes=row.duration_minutes) if row.duration_minutes else None,
        guaranteed_delta=row.guaranteed_delta,
        limit_delta=row.limit_delta,
        guaranteed=row.guaranteed,
        limit=row.limit,
        priority_class_id=row.priority_class_id,
    )


def approved_window_specs(*, quota_ids: Iterable[int] | None = None) -> dict[int, list[WindowSpec]]:
    """Quota id → the approved windows that change it (one query)."""
    rows = QuotaWindow.objects.filter(state=WindowState.APPROVED)
    if quota_ids is not None:
        rows = rows.filter(quota_id__in=list(quota_ids))
    out: dict[int, list[WindowSpec]] = defaultdict(list)
    for row in rows.order_by("pk"):
        out[row.quota_id].append(window_spec(row))
    return dict(out)

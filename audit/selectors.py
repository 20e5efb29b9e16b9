"""Filtered reads of the audit log: what to read (:class:`AuditFilters`) and the reads themselves.

Who may read which events is decided above the tenants, in :mod:`compliance.access`.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.db.models import QuerySet

from audit.integrity.bundle import Scope
from audit.models import AuditEvent
from audit.services import audit_time_format


@dataclass(frozen=True)
class AuditFilters:
    """What to read. ``department_ids`` None means every event, including those of no department."""

    time_from: datetime.datetime | None = None
    time_to: datetime.datetime | None = None
    department_ids: frozenset[int] | None = None
    actors: tuple[str, ...] | None = None
    actions: tuple[str, ...] | None = None

    def scope(self) -> Scope:
        return Scope(
            time_from=audit_time_format(self.time_from) if self.time_from else None,
            time_to=audit_time_format(self.time_to) if self.time_to else None,
            departments=tuple(sorted(self.department_ids)) if self.department_ids is not None else None,
            actors=self.actors,
            actions=self.actions,
        )


def audit_event_list(*, filters: AuditFilters) -> QuerySet[AuditEvent]:
    events = AuditEvent.objects.all()
    if filters.time_from is not None:
        events = events.filter(occurred_at__gte=filters.time_from)
    if filters.time_to is not None:
        events = events.filter(occurred_at__lt=filters.time_to)
    if filters.department_ids is not None:
        events = events.filter(department_id__in=sorted(filters.department_ids))
    if filters.actors is not None:
        events = events.filter(actor_username__in=filters.actors)
    if filters.actions is not None:
        events = events.filter(action__in=filters.actions)
    return events.order_by("seq")


def audit_seq_bounds(*, filters: AuditFilters, upto: int) -> tuple[int, int]:
    """The first and last seq (``<= upto``) inside the time range; time order is seq order."""
    first, last = 1, upto
    if filters.time_from is not None:
        found = (
            AuditEvent.objects.filter(occurred_at__gte=filters.time_from)
            .order_by("occurred_at", "seq").values_list("seq", flat=True).first()
        )
        first = min(found, upto + 1) if found is not None else upto + 1
    if filters.time_to is not None:
        found = (
            AuditEvent.objects.filter(occurred_at__lt=filters.time_to)
            .order_by("-occurred_at", "-seq").values_list("seq", flat=True).first()
        )
        last = min(found, upto) if found is not None else 0
    return first, last

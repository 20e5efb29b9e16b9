"""Who may read which audit events.

Auditors read everything when they hold the role on a top-level department (an organisation), and
their subtree otherwise; platform admins read everything; department admins read the events of
their subtree. Everybody else sees no audit event at all, and the endpoints answer 404.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import Http404

from audit.models import AuditEvent
from audit.selectors import AuditFilters, audit_event_list
from tenants.access import access_for, department_parent_map, department_subtree_ids
from tenants.models import Membership, Role


@dataclass(frozen=True)
class AuditVisibility:
    everything: bool
    department_ids: frozenset[int]

    @property
    def any(self) -> bool:
        return self.everything or bool(self.department_ids)


def audit_visibility_for(*, user: AbstractBaseUser | AnonymousUser) -> AuditVisibility:
    access = access_for(user)
    if access.user_id is None:
        return AuditVisibility(everything=False, department_ids=frozenset())
    organisation_auditor = Membership.objects.filter(
        user_id=access.user_id, role=Role.AUDITOR, department__parent__isnull=True
    ).exists()
    if access.is_platform_admin or organisation_auditor:
        return AuditVisibility(everything=True, department_ids=frozenset())
    return AuditVisibility(everything=False, department_ids=access.audited | access.administered)


def audit_filters_for(
    *,
    visibility: AuditVisibility,
    department_id: int | None = None,
    time_from: datetime.datetime | None = None,
    time_to: datetime.datetime | None = None,
    actor: str | None = None,
    action: str | None = None,
) -> AuditFilters:
    """The filters a user may apply: a department outside their view is unknown to them (404)."""
    if not visibility.any:
        raise Http404("No audit events are visible to you.")
    departments: frozenset[int] | None
    if department_id is not None:
        if not visibility.everything and department_id not in visibility.department_ids:
            raise Http404("No such department.")
        departments = department_subtree_ids(root_ids=[department_id], parents=department_parent_map())
        if not visibility.everything:
            departments &= visibility.department_ids
    else:
        departments = None if visibility.everything else visibility.department_ids
    return AuditFilters(
        time_from=time_from,
        time_to=time_to,
        department_ids=departments,
        actors=(actor,) if actor else None,
        actions=(action,) if action else None,
    )


def audit_event_get(*, visibility: AuditVisibility, seq: int) -> AuditEvent:
    """One event, read under exactly the rules of the list (:func:`audit_filters_for` without a
    filter): an event the reader may not list, and any event for someone who reads none, is 404."""
    try:
        return audit_event_list(filters=audit_filters_for(visibility=visibility)).get(seq=seq)
    except AuditEvent.DoesNotExist:
        raise Http404("No such audit event.") from None


def audit_event_neighbours(*, visibility: AuditVisibility, seq: int) -> tuple[int | None, int | None]:
    """The seq of the reader's visible events just before and just after ``seq`` in the chain."""
    events = audit_event_list(filters=audit_filters_for(visibility=visibility))
    before = events.filter(seq__lt=seq).order_by("-seq").values_list("seq", flat=True).first()
    after = events.filter(seq__gt=seq).order_by("seq").values_list("seq", flat=True).first()
    return before, after

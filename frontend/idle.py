"""The idle-grant inbox's reads: the open cases the reader may see, what each reader may do with
each (keep, release, exempt) and how many keeps each grant has left, the cases closed in the last
7 days, and the policies in force. A fixed number of queries whatever the number of cases."""

from __future__ import annotations

import datetime
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User

from accounting.idle.selectors import idle_case_list, idle_policy_list
from accounting.idle_models import OPEN_STATES, IdleCase, IdleState
from allocations.grants import idle_ladder as ladder
from tenants.access import access_for
from tenants.models import Project

OPEN_LIMIT = 200
CLOSED_LIMIT = 50
CLOSED_SPAN = datetime.timedelta(days=7)


@dataclass(frozen=True)
class CaseRow:
    case: IdleCase
    can_keep: bool  # keep or release: the grant's requester, its project's members, the department's admins
    can_exempt: bool  # the department's admins, not for their own grant under four-eyes
    keeps_left: int
    mine: bool  # the reader requested the grant


def idle_inbox(*, user: User, now: datetime.datetime) -> dict[str, Any]:
    access = access_for(user)
    open_cases = list(idle_case_list(user=user, states=sorted(OPEN_STATES))[:OPEN_LIMIT])
    allocation_ids = [case.allocation_id for case in open_cases]
    kept: dict[int, list[datetime.datetime]] = defaultdict(list)
    for allocation_id, closed_at in IdleCase.objects.filter(
        allocation_id__in=allocation_ids, state=IdleState.KEPT, closed_at__gt=now - ladder.KEEP_SPAN
    ).values_list("allocation_id", "closed_at"):
        if closed_at is not None:
            kept[allocation_id].append(closed_at)
    member_of = set(
        Project.objects.filter(members=user, pk__in={case.allocation.project_id for case in open_cases})
        .values_list("pk", flat=True)
    )  # fmt: skip
    four_eyes = settings.GPUPORTAL_FOUR_EYES
    rows = []
    for case in open_cases:
        allocation = case.allocation
        admin = access.can_administer_department(allocation.project.department_id)
        mine = allocation.requested_by_id == user.pk
        rows.append(CaseRow(
            case=case, can_keep=admin or mine or allocation.project_id in member_of,
            can_exempt=admin and not (four_eyes and mine), mine=mine,
            keeps_left=ladder.keeps_left(kept_at=kept[allocation.pk], now=now, max_keeps=int(case.policy.max_keeps)),
        ))  # fmt: skip
    closed = list(
        idle_case_list(user=user).exclude(state__in=OPEN_STATES).filter(closed_at__gt=now - CLOSED_SPAN)[:CLOSED_LIMIT]
    )
    return {
        "rows": rows, "closed": closed, "policies": list(idle_policy_list(user=user).filter(is_active=True)),
        "open_limit": OPEN_LIMIT,
    }  # fmt: skip


def idle_open_count(*, user: User) -> int:
    """The open cases of the reader's own grants (the dashboard's notice)."""
    return idle_case_list(user=user, states=sorted(OPEN_STATES)).filter(allocation__requested_by=user).count()

"""Where a waiting request stands in its deciders' queue: the pending requests of the department
whose admins decide it (the nearest with admins up its tree, else the root) and below, in the
queue's order (``allocations.fair_share.queue``), the one the approvals page lists them in."""

from __future__ import annotations

import datetime
from typing import Any

from allocations.fair_share.queue import factor_of, queue_key
from allocations.fair_share.reads import fair_share_factors
from allocations.models import Allocation, AllocationState
from tenants.access import DepartmentTree
from tenants.models import Membership, Role

NOT_YET = 2**62  # a request not yet stored comes after every stored one submitted with it


def queue_position(*, allocation: Allocation, tree: DepartmentTree, now: datetime.datetime) -> dict[str, Any] | None:
    """``position`` (from 1), ``of`` (how many wait, this one counted) and ``ahead``; None unless it
    waits (a request not yet made: where it would stand if it were made now)."""
    if allocation.state != AllocationState.PENDING:
        return None
    chain = tree.ancestors(allocation.project.department_id)
    with_admins = set(Membership.objects.filter(department_id__in=chain, role=Role.DEPARTMENT_ADMIN)
                      .values_list("department_id", flat=True))
    level = next((department for department in chain if department in with_admins), chain[-1])
    rows = list(Allocation.objects.filter(state=AllocationState.PENDING, project__department_id__in=sorted(tree.subtree(level)))
                .exclude(pk=allocation.pk).values_list("pk", "created_at", "priority_class__value", "project__department_id"))
    factors = fair_share_factors(now=now)
    mine = queue_key(priority=allocation.priority_class.value, factor=factor_of(factors, allocation.project.department_id),
                     submitted=allocation.created_at or now, tiebreak=allocation.pk or NOT_YET)
    ahead = sum(1 for pk, created, priority, department in rows
                if queue_key(priority=priority, factor=factor_of(factors, department), submitted=created, tiebreak=pk) < mine)
    return {"position": ahead + 1, "of": len(rows) + 1, "ahead": ahead}

"""Who holds what a waiting request needs, told only as far as the reader may see: the grants of
the departments the reader may read, by name; every other department as its totals, split into
what its guarantee covers and what it borrows beyond it.

For a quota refusal, the grants of the refusing level's subtree over the request's interval; for
a refusal on the GPUs, the grants on the candidate clusters' GPUs of the flavor's model. One query
for the grants, one for the guarantees.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from decimal import Decimal
from typing import Any

from allocations.catalogue.states import HOLDING_STATES
from allocations.models import Allocation, Quota
from kernel.numbers import plain
from tenants.access import Access

ZERO = Decimal(0)
NAMED_MOST = 20
"""The most grants named one by one (the rest are counted)."""


def holders_read(
    *, access: Access, interval: tuple[datetime.datetime, datetime.datetime], department_ids: list[int] | None = None,
    cluster_ids: list[int] | None = None, gpu_model: str = "",
) -> dict[str, Any]:
    """The holders over ``interval``: of ``department_ids``' grants (a quota), or of the GPUs of
    ``gpu_model`` on ``cluster_ids`` (room on the GPUs)."""
    start, end = interval
    rows = Allocation.objects.filter(state__in=HOLDING_STATES, starts_at__lt=end, ends_at__gt=start)
    if department_ids is not None:
        rows = rows.filter(project__department_id__in=department_ids)
    else:
        rows = rows.filter(cluster_id__in=cluster_ids or [], flavor__gpu_model=gpu_model)
    found: list[dict[str, Any]] = [dict(row) for row in rows.values("pk", "project__slug", "project__department_id", "project__department__slug",
                             "flavor__name", "flavor__gpu_equivalents", "quantity", "ends_at", "state").order_by("ends_at", "pk")]
    named = [row for row in found if access.reads_everything or access.can_read_department(row["project__department_id"])]
    others = [row for row in found if row not in named]
    return {"named": [_named(row) for row in named[:NAMED_MOST]], "named_more": max(len(named) - NAMED_MOST, 0),
            "departments": _totals(others)}


def _named(row: dict[str, Any]) -> dict[str, Any]:
    return {"allocation": row["pk"], "project": row["project__slug"], "department": row["project__department__slug"],
            "flavor": row["flavor__name"], "quantity": row["quantity"], "state": row["state"],
            "gpu_equivalents": plain(row["flavor__gpu_equivalents"] * row["quantity"]),
            "ends_at": row["ends_at"].isoformat()}


def _totals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each other department's GPU-equivalents, the part its guarantee covers and the part it borrows."""
    held: dict[int, Decimal] = defaultdict(Decimal)
    slugs: dict[int, str] = {}
    grants: dict[int, int] = defaultdict(int)
    for row in rows:
        department = row["project__department_id"]
        held[department] += row["flavor__gpu_equivalents"] * row["quantity"]
        slugs[department] = row["project__department__slug"]
        grants[department] += 1
    guaranteed = dict(Quota.objects.filter(department_id__in=sorted(held), flavor=None).values_list("department_id",
                                                                                                   "guaranteed"))
    out = []
    for department, amount in sorted(held.items(), key=lambda item: slugs[item[0]]):
        covered = min(amount, guaranteed.get(department, ZERO))
        out.append({"department": slugs[department], "grants": grants[department], "gpu_equivalents": plain(amount),
                    "guaranteed": plain(covered), "borrowed": plain(amount - covered)})
    return out

"""Reads of the usage accounting: GPU-equivalent-hours granted, measured and used over a range,
by hour, day or month (UTC), grouped by department, project, flavor or cluster, summed in SQL from
``UsageHour``.

Who sees what (``tenants.access``): a platform admin, or whoever reads every department, sees all
of them; anyone else only the departments they read (their subtrees included); someone without a
role, or naming a department or project they cannot read, gets 404. A department's usage includes
its sub-departments'. One query for the rows, whatever the range; the total is their sum.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import F, QuerySet, Sum
from django.db.models.functions import TruncDay, TruncMonth
from django.http import Http404

from accounting.models import UsageHour
from clusters.models import Cluster
from tenants.access import access_for, department_subtree_ids
from tenants.models import Department, Project

User = AbstractBaseUser | AnonymousUser

GRANULARITIES = ("hour", "day", "month")
GROUPS = ("department", "project", "flavor", "cluster", "none")
_LABELS = {
    "department": "department__slug", "project": "project__slug", "flavor": "flavor__name", "cluster": "cluster__name",
}  # fmt: skip


@dataclass(frozen=True)
class UsageTotals:
    granted: Decimal
    measured: Decimal
    used: Decimal

    @property
    def coverage(self) -> float | None:
        """The share of the granted GPU-hours that had a reading (None: nothing granted)."""
        return float(self.measured / self.granted) if self.granted > 0 else None

    @property
    def efficiency(self) -> float | None:
        """Busy over measured (None: nothing measured): unknown hours are left out, not idle."""
        return float(self.used / self.measured) if self.measured > 0 else None


@dataclass(frozen=True)
class UsageRow:
    period: datetime.datetime
    group: str
    key: int | None  # the group's id (None for group "none")
    name: str
    totals: UsageTotals


@dataclass(frozen=True)
class UsageReport:
    start: datetime.datetime
    end: datetime.datetime
    granularity: str
    group_by: str
    rows: tuple[UsageRow, ...]
    total: UsageTotals


def usage_report(
    *, user: User, start: datetime.datetime, end: datetime.datetime, granularity: str, group_by: str = "department",
    department_id: int | None = None, project_id: int | None = None, cluster_id: int | None = None,
) -> UsageReport:  # fmt: skip
    """The usage of the hours that begin in [start, end) that ``user`` may read (module docstring)."""
    if granularity not in GRANULARITIES or group_by not in GROUPS:
        raise ValueError(f"granularity {granularity!r} or group {group_by!r} unknown")
    rows = _readable_hours(user, department_id=department_id, project_id=project_id, cluster_id=cluster_id)
    rows = rows.filter(hour__gte=start, hour__lt=end)
    sums = {"granted_sum": Sum("granted"), "measured_sum": Sum("measured"), "used_sum": Sum("used")}
    period: Any = F("hour")
    if granularity == "day":
        period = TruncDay("hour", tzinfo=datetime.UTC)
    elif granularity == "month":
        period = TruncMonth("hour", tzinfo=datetime.UTC)
    keys: list[str] = ["period"]
    if group_by != "none":
        keys += [f"{group_by}_id", _LABELS[group_by]]
    grouped = rows.annotate(period=period).values(*keys).annotate(**sums).order_by(*keys)
    found = []
    for item in grouped:
        key = item.get(f"{group_by}_id")
        name = str(item.get(_LABELS.get(group_by, ""), "all"))
        found.append(UsageRow(period=_utc(item["period"]), group=group_by, key=key, name=name, totals=_totals(item)))
    total = UsageTotals(  # every hour is in exactly one row: the total is their sum, exactly
        granted=sum((row.totals.granted for row in found), Decimal(0)),
        measured=sum((row.totals.measured for row in found), Decimal(0)),
        used=sum((row.totals.used for row in found), Decimal(0)),
    )
    return UsageReport(start=start, end=end, granularity=granularity, group_by=group_by, rows=tuple(found), total=total)


def _readable_hours(
    user: User, *, department_id: int | None, project_id: int | None, cluster_id: int | None
) -> QuerySet[UsageHour]:
    access = access_for(user)
    if not access.has_any_role:
        raise Http404("No usage to show.")
    rows = UsageHour.objects.all()
    if not access.reads_everything:
        rows = rows.filter(department_id__in=access.readable)
    if department_id is not None:
        parents: dict[int, int | None] = dict(Department.objects.values_list("pk", "parent_id"))
        if not access.can_read_department(department_id) or department_id not in parents:
            raise Http404("No such department.")
        rows = rows.filter(department_id__in=department_subtree_ids(root_ids=[department_id], parents=parents))
    if project_id is not None:
        department = Project.objects.filter(pk=project_id).values_list("department_id", flat=True).first()
        if department is None or not access.can_read_department(department):
            raise Http404("No such project.")
        rows = rows.filter(project_id=project_id)
    if cluster_id is not None:
        if not Cluster.objects.filter(pk=cluster_id).exists():
            raise Http404("No such cluster.")
        rows = rows.filter(cluster_id=cluster_id)
    return rows


def _totals(item: dict[str, Any]) -> UsageTotals:
    return UsageTotals(
        granted=item["granted_sum"] or Decimal(0), measured=item["measured_sum"] or Decimal(0),
        used=item["used_sum"] or Decimal(0),
    )  # fmt: skip


def _utc(moment: datetime.datetime) -> datetime.datetime:
    return moment.astimezone(datetime.UTC)

"""Reads of the usage accounting: GPU-equivalent-hours granted, measured and used over a range,
by hour, day or month (UTC), grouped by department, project, flavor or cluster, summed in SQL from
``UsageHour``.

Who sees what (``tenants.access``): a platform admin, or whoever reads every department, sees all
of them; anyone else only the departments they read (their subtrees included); someone without a
role, or naming a department or project they cannot read, gets 404. A department's usage includes
its sub-departments'. By hour, one query over ``UsageHour``; by day or month, one over ``UsageDay``
for the whole days and one over ``UsageHour`` for the hours at either end; the total is the rows' sum.
"""

from __future__ import annotations

import datetime
import operator
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from functools import reduce
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import F, Q, QuerySet, Sum
from django.db.models.functions import TruncDay, TruncMonth
from django.http import Http404

from accounting.hours import day_floor, hours_summed
from accounting.models import UsageDay, UsageHour
from allocations.catalogue.selectors import quota_list
from allocations.quotas.usage import QuotaSpan, QuotaUsage, quota_spans, quota_usages
from clusters.models import Cluster
from kernel.reads import SharedReads
from tenants.access import access_for
from tenants.models import Project

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
    """The usage of the hours that begin in [start, end) that ``user`` may read (module docstring).
    By day or month, whole UTC days are read from ``UsageDay`` and only the hours before the first
    and after the last whole day from ``UsageHour``: the same sums, exactly, from far fewer rows."""
    if granularity not in GRANULARITIES or group_by not in GROUPS:
        raise ValueError(f"granularity {granularity!r} or group {group_by!r} unknown")
    scope = _readable(user, department_id=department_id, project_id=project_id, cluster_id=cluster_id)
    hours = UsageHour.objects.filter(scope)
    keys: list[str] = ["period"] + ([f"{group_by}_id", _LABELS[group_by]] if group_by != "none" else [])
    if granularity == "hour":
        parts = [_grouped(hours.filter(hour__gte=start, hour__lt=end), F("hour"), keys)]
    else:
        first_day = _day_ceil(start)
        last_day = max(first_day, day_floor(end))
        trunc: type[TruncDay] | type[TruncMonth] = TruncDay if granularity == "day" else TruncMonth
        ranges = [(begin, finish) for begin, finish in ((start, min(first_day, end)), (last_day, end)) if begin < finish]
        parts = []
        if ranges:  # the hours before the first and after the last whole day, when there are any
            edges = reduce(operator.or_, (Q(hour__gte=begin, hour__lt=finish) for begin, finish in ranges))
            parts.append(_grouped(hours.filter(edges), trunc("hour", tzinfo=datetime.UTC), keys))
        if first_day < last_day:
            days = UsageDay.objects.filter(scope, day__gte=first_day, day__lt=last_day)
            parts.append(_grouped(days, F("day") if granularity == "day" else TruncMonth("day", tzinfo=datetime.UTC), keys))
    sums: dict[tuple[datetime.datetime, int | None], tuple[str, Decimal, Decimal, Decimal]] = {}
    for part in parts:
        for item in part:
            key = (_utc(item["period"]), item.get(f"{group_by}_id"))
            name, granted, measured, used = sums.get(key, (str(item.get(_LABELS.get(group_by, ""), "all")),
                                                           Decimal(0), Decimal(0), Decimal(0)))  # fmt: skip
            totals = _totals(item)
            sums[key] = (name, granted + totals.granted, measured + totals.measured, used + totals.used)
    found = [
        UsageRow(period=period, group=group_by, key=key, name=name,
                 totals=UsageTotals(granted=granted, measured=measured, used=used))  # fmt: skip
        for (period, key), (name, granted, measured, used) in sorted(sums.items(), key=lambda item: (item[0][0], item[0][1] or 0))
    ]
    total = UsageTotals(  # every hour is in exactly one row: the total is their sum, exactly
        granted=sum((row.totals.granted for row in found), Decimal(0)),
        measured=sum((row.totals.measured for row in found), Decimal(0)),
        used=sum((row.totals.used for row in found), Decimal(0)),
    )
    return UsageReport(start=start, end=end, granularity=granularity, group_by=group_by, rows=tuple(found), total=total)


@dataclass(frozen=True)
class QuotaInUse:
    """One quota in a usage report: in use at an instant, and at its peak over the report's range."""

    at: QuotaUsage
    over: QuotaSpan


def usage_quotas(
    *, user: User, at: datetime.datetime, start: datetime.datetime, end: datetime.datetime,
    department_id: int | None = None, project_id: int | None = None,
) -> list[QuotaInUse]:  # fmt: skip
    """The quotas of the departments the report covers (``department``: its subtree; ``project``:
    its department), each at ``at`` and over ``[start, end)`` (``allocations.quotas.usage``): what the
    grants holding at that instant hold, and the most they hold at any one moment of the range."""
    reads, tree = SharedReads(), access_for(user).tree  # the tree the access check read: not read again
    quotas = quota_list(user=user)
    if department_id is not None:
        quotas = quotas.filter(department_id__in=sorted(tree.subtree(department_id)))
    if project_id is not None:
        quotas = quotas.filter(department__projects__pk=project_id)
    found = list(quotas)
    usages = quota_usages(quotas=found, at=at, reads=reads, tree=tree)
    spans = quota_spans(quotas=found, start=start, end=end, reads=reads, tree=tree)
    return [QuotaInUse(at=usage, over=span) for usage, span in zip(usages, spans, strict=True)]


def _day_ceil(moment: datetime.datetime) -> datetime.datetime:
    day = day_floor(moment)
    return day if day == moment else day + datetime.timedelta(days=1)


def _grouped(rows: QuerySet[Any], period: Any, keys: list[str]) -> list[dict[str, Any]]:
    """The sums of ``rows`` per period and group key (one query)."""
    sums = {"granted_sum": Sum("granted"), "measured_sum": Sum("measured"), "used_sum": Sum("used")}
    # unordered: the caller sorts the rows; a sort in SQL would sort every summed row first
    return list(rows.annotate(period=period).values(*keys).annotate(**sums).order_by())


def _readable(user: User, *, department_id: int | None, project_id: int | None, cluster_id: int | None) -> Q:
    """What ``user`` reads, narrowed to the filters, as a condition on the columns ``UsageHour`` and
    ``UsageDay`` share (404 for someone without a role, or for a department, project or cluster
    that is not there for them)."""
    access = access_for(user)
    if not access.has_any_role:
        raise Http404("No usage to show.")
    scope = Q()
    # A department the user reads lies inside what they read with its whole subtree (a role covers
    # a subtree): narrowed to it, the scope needs no condition on everything they read.
    if not access.reads_everything and department_id is None:
        scope &= Q(department_id__in=sorted(access.readable))
    if department_id is not None:
        if not access.can_read_department(department_id) or department_id not in access.tree.parents:
            raise Http404("No such department.")
        scope &= Q(department_id__in=sorted(access.tree.subtree(department_id)))
    if project_id is not None:
        department = Project.objects.filter(pk=project_id).values_list("department_id", flat=True).first()
        if department is None or not access.can_read_department(department):
            raise Http404("No such project.")
        scope &= Q(project_id=project_id)
    if cluster_id is not None:
        if not Cluster.objects.filter(pk=cluster_id).exists():
            raise Http404("No such cluster.")
        scope &= Q(cluster_id=cluster_id)
    return scope


def _totals(item: dict[str, Any]) -> UsageTotals:
    return UsageTotals(granted=hours_summed(item["granted_sum"]), measured=hours_summed(item["measured_sum"]),
                       used=hours_summed(item["used_sum"]))


def _utc(moment: datetime.datetime) -> datetime.datetime:
    return moment.astimezone(datetime.UTC)


@dataclass(frozen=True)
class IdleGrant:
    """One grant's GPU-equivalent-hours over a range, and how much of what was measured sat idle."""

    allocation_id: int
    department: str
    project: str
    flavor: str
    totals: UsageTotals

    @property
    def idle(self) -> Decimal:
        """Measured but not busy: unknown hours are not idle."""
        return self.totals.measured - self.totals.used


def usage_idle_grants(
    *, user: User, start: datetime.datetime, end: datetime.datetime, department_ids: Iterable[int] | None = None,
    limit: int = 10,
) -> list[IdleGrant]:  # fmt: skip
    """The grants that sat idle longest (measured minus used GPU-equivalent-hours) in [start, end),
    among the departments ``user`` reads (and ``department_ids``, when given); one query."""
    rows = UsageHour.objects.filter(
        _readable(user, department_id=None, project_id=None, cluster_id=None), hour__gte=start, hour__lt=end
    )
    if department_ids is not None:
        rows = rows.filter(department_id__in=list(department_ids))
    grouped = (
        rows.values("allocation_id", "department__slug", "project__slug", "flavor__name")
        .annotate(granted_sum=Sum("granted"), measured_sum=Sum("measured"), used_sum=Sum("used"))
        .annotate(idle=F("measured_sum") - F("used_sum")).filter(idle__gt=0).order_by("-idle", "allocation_id")[:limit]
    )  # fmt: skip
    return [
        IdleGrant(allocation_id=item["allocation_id"], department=item["department__slug"], project=item["project__slug"],
                  flavor=item["flavor__name"], totals=_totals(item))  # fmt: skip
        for item in grouped
    ]

"""The accounting part of the department usage page: the last 30 days' GPU-equivalent-hours per
department (granted, measured, used) as numbers and as a chart by day, the grants that sat idle
longest in the last 7 days with their open idle cases, and the statements the reader may see with
their CSV. A fixed number of queries whatever the number of departments and grants."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.utils.safestring import SafeString

from accounting.hours import day_floor, hour_floor
from accounting.idle.selectors import idle_case_list
from accounting.idle_models import OPEN_STATES, IdleCase
from accounting.selectors import IdleGrant, UsageRow, usage_idle_grants, usage_report
from accounting.statement_reads import statement_list
from frontend.charts import ChartBucket, utilisation_chart

SPAN = datetime.timedelta(days=30)
IDLE_SPAN = datetime.timedelta(days=7)
DAY = datetime.timedelta(days=1)
TOP_IDLE = 10
MAX_CHARTS = 12
"""Charts drawn on one page: the departments that held the most; the table lists them all."""


@dataclass(frozen=True)
class DepartmentUsageChart:
    department: str
    chart: SafeString


@dataclass(frozen=True)
class IdleGrantRow:
    grant: IdleGrant
    case: IdleCase | None  # its open idle case, if any


def _daily_charts(rows: Sequence[UsageRow], *, start: datetime.datetime, end: datetime.datetime) -> list[DepartmentUsageChart]:
    """Per department (the ``MAX_CHARTS`` that held the most), each UTC day's mean GPU-equivalents
    granted and busy (hours / 24), the granted hours without a reading hatched as unknown; a day
    without a grant is zero, not unknown."""
    by_department: dict[str, dict[datetime.datetime, UsageRow]] = {}
    for row in rows:
        by_department.setdefault(row.name, {})[row.period] = row
    days: list[datetime.datetime] = []
    moment = day_floor(start)
    while moment < end:
        days.append(moment)
        moment += DAY
    granted = {name: sum((row.totals.granted for row in found.values()), Decimal(0)) for name, found in by_department.items()}
    charted = sorted(by_department, key=lambda name: (-granted[name], name))[:MAX_CHARTS]
    charts = []
    for name in sorted(charted):
        found = by_department[name]
        buckets = []
        for day in days:
            held = found.get(day)
            allocated = float(held.totals.granted) / 24 if held else 0.0
            measured = float(held.totals.measured) / 24 if held else 0.0
            used = float(held.totals.used) / 24 if held and held.totals.measured > 0 else None
            buckets.append(ChartBucket(start=day, end=day + DAY, allocated=allocated,
                                       used=used if allocated > 0 else 0.0, unknown=max(0.0, allocated - measured)))  # fmt: skip
        charts.append(DepartmentUsageChart(department=name, chart=utilisation_chart(
            buckets=buckets, title=f"GPU-equivalents granted and busy per day, {name}, last 30 days",
            chart_id=f"usage-{name}",
        )))  # fmt: skip
    return charts


def _idle_grants(*, user: User, department_ids: Sequence[int], now: datetime.datetime) -> list[IdleGrantRow]:
    end = hour_floor(now)
    grants = usage_idle_grants(user=user, start=end - IDLE_SPAN, end=end, department_ids=department_ids, limit=TOP_IDLE)
    cases = {
        case.allocation_id: case
        for case in idle_case_list(user=user, states=sorted(OPEN_STATES)).filter(
            allocation_id__in=[grant.allocation_id for grant in grants]
        )
    }
    return [IdleGrantRow(grant=grant, case=cases.get(grant.allocation_id)) for grant in grants]


def department_accounting(*, user: User, department_ids: Sequence[int], now: datetime.datetime) -> dict[str, Any]:
    end = hour_floor(now)
    report = usage_report(user=user, start=end - SPAN, end=end, granularity="day", group_by="department")
    mine = [row for row in report.rows if row.key in department_ids]
    hours: dict[str, dict[str, Any]] = {}
    for row in mine:
        found = hours.setdefault(row.name, {"department": row.name, "granted": Decimal(0), "measured": Decimal(0),
                                            "used": Decimal(0)})  # fmt: skip
        found["granted"] += row.totals.granted
        found["measured"] += row.totals.measured
        found["used"] += row.totals.used
    for found in hours.values():
        found["efficiency"] = found["used"] / found["measured"] if found["measured"] else None
        found["coverage"] = found["measured"] / found["granted"] if found["granted"] else None
    statements = statement_list(user=user).filter(department_id__in=department_ids)[:24]
    return {
        "gpu_hours": sorted(hours.values(), key=lambda item: item["department"]), "statements": statements,
        "gpu_hours_since": end - SPAN, "usage_charts": _daily_charts(mine, start=end - SPAN, end=end),
        "idle_grants": _idle_grants(user=user, department_ids=department_ids, now=now), "idle_since": end - IDLE_SPAN,
    }  # fmt: skip

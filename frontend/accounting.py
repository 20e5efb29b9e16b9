"""The accounting part of the department usage page: the last 30 days' GPU-equivalent-hours per
department (granted, measured, used), and the statements the reader may see with their CSV."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from django.contrib.auth.models import User

from accounting.hours import hour_floor
from accounting.selectors import usage_report
from accounting.statement_reads import statement_list

SPAN = datetime.timedelta(days=30)


def department_accounting(*, user: User, department_ids: Sequence[int], now: datetime.datetime) -> dict[str, Any]:
    end = hour_floor(now)
    report = usage_report(user=user, start=end - SPAN, end=end, granularity="month", group_by="department")
    hours: dict[str, dict[str, Any]] = {}
    for row in report.rows:  # the span may cross a month: one line per department
        if row.key not in department_ids:
            continue
        found = hours.setdefault(row.name, {"department": row.name, "granted": 0, "measured": 0, "used": 0})
        found["granted"] += row.totals.granted
        found["measured"] += row.totals.measured
        found["used"] += row.totals.used
    for found in hours.values():
        found["efficiency"] = found["used"] / found["measured"] if found["measured"] else None
        found["coverage"] = found["measured"] / found["granted"] if found["granted"] else None
    statements = statement_list(user=user).filter(department_id__in=department_ids)[:24]
    return {"gpu_hours": sorted(hours.values(), key=lambda item: item["department"]), "statements": statements,
            "gpu_hours_since": end - SPAN}  # fmt: skip

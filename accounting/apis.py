"""``GET /api/v1/usage/``: GPU-equivalent-hours granted, measured and used (docs/accounting.md), and the
quotas of the departments covered: in use at an instant (``at``, default now) and at their peak over
the range (docs/quotas.md, "In use, at an instant and over an interval")."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from accounting import selectors
from accounting.hours import HOUR, hour_floor
from allocations.api.catalogue import InstantField
from kernel.api.base import IdField, filters, iso_datetime
from kernel.api.openapi import errors
from kernel.api.views import ApiView
from kernel.clock import clock_now

DEFAULT_SPAN = datetime.timedelta(days=7)
# The longest range per granularity: a reply stays a few thousand rows.
LONGEST = {
    "hour": datetime.timedelta(days=31),
    "day": datetime.timedelta(days=400),
    "month": datetime.timedelta(days=3660),
}


class UsageFilter(serializers.Serializer[Any]):
    department = IdField(required=False, help_text="A department id (its sub-departments included).")
    project = IdField(required=False, help_text="A project id.")
    cluster = IdField(required=False, help_text="A cluster id.")
    # "from" is a Python keyword: the field is added under its query name by get_fields.
    to = serializers.DateTimeField(
        required=False, help_text="End (exclusive), floored to its UTC hour; default: the current hour's start."
    )
    granularity = serializers.ChoiceField(choices=list(selectors.GRANULARITIES), required=False, default="day")
    group_by = serializers.ChoiceField(choices=list(selectors.GROUPS), required=False, default="department")
    at = InstantField(required=False, help_text="The instant the quotas' `in_use` is read at (ISO 8601); default: now.")

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        fields["from"] = serializers.DateTimeField(
            required=False, help_text="Start, floored to its UTC hour; default: 7 days before 'to'."
        )
        return fields

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        end = hour_floor(attrs.get("to") or clock_now())
        start = hour_floor(attrs["from"]) if attrs.get("from") else end - DEFAULT_SPAN
        if start >= end:
            raise serializers.ValidationError({"to": ["must be at least an hour after 'from'."]})
        longest = LONGEST[attrs["granularity"]]
        if end - start > longest + HOUR:
            raise serializers.ValidationError(
                {"from": [f"at most {longest.days} days before 'to' with granularity {attrs['granularity']}."]}
            )
        attrs["from"], attrs["to"] = start, end
        return attrs


@extend_schema_serializer(component_name="UsageTotals")
class TotalsOut(serializers.Serializer[Any]):
    granted_gpu_hours = serializers.DecimalField(
        max_digits=20, decimal_places=6, source="granted", help_text="GPU-equivalent-hours held."
    )
    measured_gpu_hours = serializers.DecimalField(
        max_digits=20, decimal_places=6, source="measured", help_text="... of which a reading was known."
    )
    used_gpu_hours = serializers.DecimalField(max_digits=20, decimal_places=6, source="used", help_text="... of which busy.")
    coverage = serializers.FloatField(allow_null=True, help_text="measured / granted; null when nothing was granted.")
    efficiency = serializers.FloatField(
        allow_null=True, help_text="used / measured; null when nothing was measured (unknown is never idle)."
    )


@extend_schema_serializer(component_name="UsageRow")
class RowOut(serializers.Serializer[Any]):
    period = serializers.DateTimeField(help_text="The hour's, day's or month's start (UTC).")
    group = serializers.CharField()
    key = serializers.IntegerField(allow_null=True, help_text="The id of the department, project, flavor or cluster.")
    name = serializers.CharField(help_text="Its slug or name (\"all\" for group_by=none).")
    totals = TotalsOut()


@extend_schema_serializer(component_name="UsageReport")
class ReportOut(serializers.Serializer[Any]):
    start = serializers.DateTimeField(help_text="The first hour.")
    end = serializers.DateTimeField(help_text="The end (exclusive).")
    granularity = serializers.ChoiceField(choices=list(selectors.GRANULARITIES))
    group_by = serializers.ChoiceField(choices=list(selectors.GROUPS))
    rows = RowOut(many=True)
    total = TotalsOut()


@extend_schema_serializer(component_name="UsageQuota")
class QuotaInUseOut(serializers.Serializer[Any]):
    quota = serializers.IntegerField()
    department = serializers.CharField()
    flavor = serializers.CharField(allow_null=True, help_text="Null: the department's GPU-equivalents.")
    unit = serializers.ChoiceField(choices=["units", "gpu_equivalents"])
    in_use = serializers.DecimalField(
        max_digits=14, decimal_places=4,
        help_text="What the grants of the department's subtree that hold at `at` hold (their interval contains it).",
    )
    effective_limit = serializers.DecimalField(max_digits=14, decimal_places=4, help_text="The limit in force at `at`.")
    limit_by = serializers.IntegerField(allow_null=True, help_text="The quota window that set it; null: the quota's own.")
    peak_in_use = serializers.DecimalField(
        max_digits=14, decimal_places=4,
        help_text="The most held at any one moment of [start, end): never the sum of grants that do not overlap.",
    )
    lowest_limit = serializers.DecimalField(
        max_digits=14, decimal_places=4, help_text="The least limit in force at any moment of [start, end)."
    )


@extend_schema_serializer(component_name="UsageAnswer")
class UsageOut(ReportOut):
    at = serializers.DateTimeField(help_text="The instant of the quotas' `in_use`: now, or the query's `at`.")
    quotas = QuotaInUseOut(
        many=True, help_text="The quotas of the departments covered (a department's subtree, a project's department); "
        "quotas span clusters, so `cluster` does not narrow them.",
    )


class UsageApi(ApiView):
    @extend_schema(parameters=[UsageFilter], responses={200: UsageOut, **errors(400, 401, 404)})
    def get(self, request: Request) -> Response:
        params = filters(UsageFilter, request)
        report = selectors.usage_report(
            user=request.user, start=params["from"], end=params["to"], granularity=params["granularity"],
            group_by=params["group_by"], department_id=params.get("department"), project_id=params.get("project"),
            cluster_id=params.get("cluster"),
        )  # fmt: skip
        at = params.get("at") or clock_now()
        quotas = selectors.usage_quotas(user=request.user, at=at, start=report.start, end=report.end,
                                        department_id=params.get("department"), project_id=params.get("project"))
        return Response({**report_data(report), "at": iso_datetime(at), "quotas": [_quota(found) for found in quotas]})


def _amount(value: Decimal) -> str:
    return f"{value:.4f}"


def _quota(found: selectors.QuotaInUse) -> dict[str, Any]:
    quota = found.at.quota
    return {
        "quota": quota.pk, "department": quota.department.slug, "flavor": quota.flavor.name if quota.flavor else None,
        "unit": "units" if quota.flavor_id else "gpu_equivalents", "in_use": _amount(found.at.in_use),
        "effective_limit": _amount(found.at.effective_limit), "limit_by": found.at.limit_by,
        "peak_in_use": _amount(found.over.peak), "lowest_limit": _amount(found.over.lowest_limit),
    }  # fmt: skip


def _totals(totals: selectors.UsageTotals) -> dict[str, Any]:
    return {
        "granted_gpu_hours": f"{totals.granted:.6f}", "measured_gpu_hours": f"{totals.measured:.6f}",
        "used_gpu_hours": f"{totals.used:.6f}", "coverage": totals.coverage, "efficiency": totals.efficiency,
    }  # fmt: skip


def report_data(report: selectors.UsageReport) -> dict[str, Any]:
    """``ReportOut``'s fields, written without the serializer (it describes the answer in the
    schema): a month by day for many departments is thousands of rows, and DRF's fields cost more
    than the query. ``tests/accounting/test_usage_api.py`` holds the two to the same output."""
    periods: dict[datetime.datetime, str] = {}  # a few periods, many rows each: each written once
    for row in report.rows:
        if row.period not in periods:
            periods[row.period] = iso_datetime(row.period)
    return {
        "start": iso_datetime(report.start), "end": iso_datetime(report.end), "granularity": report.granularity,
        "group_by": report.group_by, "total": _totals(report.total),
        "rows": [
            {"period": periods[row.period], "group": row.group, "key": row.key, "name": row.name, "totals": _totals(row.totals)}
            for row in report.rows
        ],
    }  # fmt: skip

"""What the utilisation page, the allocation page's usage panel and the GPU map's overlay show,
built from ``telemetry.utilisation_reads`` and ``telemetry.gpu_busy`` and drawn by ``charts``."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils.safestring import SafeString

from allocations.catalogue.states import HOLDING_STATES
from allocations.models import Allocation
from clusters.models import Cluster
from frontend.charts import ChartBucket, meter, number, sparkline, utilisation_chart
from frontend.forms import DescribedFieldsMixin
from frontend.gpu_map import GpuMap
from kernel.times import minute_utc
from telemetry.gpu_busy import GpuBusy, gpu_busy_overlay
from telemetry.utilisation_reads import (
    DEFAULT_RANGE,
    RANGES,
    ClusterUtilisation,
    UtilisationRange,
    UtilisationSeries,
    allocation_activity,
)

GIB = 1024**3
RANGE_CHOICES = [("day", "Day (5-minute buckets)"), ("week", "Week (hourly)"), ("month", "Month (daily)")]


class UtilisationForm(DescribedFieldsMixin, forms.Form):
    """The page's query string: which cluster, which range. Both optional (the first cluster, a
    week); a value that is not one of the choices is a 400 naming the field."""

    cluster = forms.ModelChoiceField(queryset=Cluster.objects.none(), required=False, empty_label=None)
    range = forms.ChoiceField(choices=RANGE_CHOICES, required=False)

    def __init__(self, *args: Any, clusters: QuerySet[Cluster], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cluster = self.fields["cluster"]
        assert isinstance(cluster, forms.ModelChoiceField)
        cluster.queryset = clusters
        cluster.label_from_instance = lambda obj: obj.display_name or obj.name  # type: ignore[method-assign]
        self.describe_fields()


def percent(value: float | None) -> str:
    return f"{round(100 * value)} %" if value is not None else "unknown"


def chart_buckets(series: UtilisationSeries) -> list[ChartBucket]:
    return [
        ChartBucket(start=bucket.start, end=bucket.end, allocated=bucket.allocated, used=bucket.measured_used,
                    unknown=bucket.unknown)  # fmt: skip
        for bucket in series.buckets
    ]


@dataclass(frozen=True)
class SeriesView:
    key: str
    label: str
    headline: str
    details: list[str]
    chart: SafeString


def _story(series: UtilisationSeries, spec: UtilisationRange) -> str | None:
    """The first day of the range against the last, for ranges longer than a day."""
    if spec.span <= datetime.timedelta(days=1) or not series.buckets:
        return None
    day = datetime.timedelta(days=1)
    first_start, last_end = series.buckets[0].start, series.buckets[-1].end
    first = series.ratio_between(first_start, first_start + day)
    last = series.ratio_between(last_end - day - datetime.timedelta(seconds=spec.bucket_seconds), last_end)
    if first is None or last is None:
        return None
    return f"{percent(first)} in the first day of the range, {percent(last)} in the last."


def series_view(series: UtilisationSeries, spec: UtilisationRange, *, chart_id: str, title: str) -> SeriesView:
    ratio = series.ratio
    if series.allocated_gpu_hours <= 0:
        headline = f"Nothing was allocated in the {spec.label}."
    elif ratio is None:
        headline = f"Use unknown: nothing allocated in the {spec.label} has a reading."
    else:
        headline = f"{percent(ratio)} of allocated GPU-equivalents used"
    details = []
    if series.allocated_gpu_hours > 0:
        details.append(
            f"{number(series.used_gpu_hours)} GPU-equivalent-hours busy of {number(series.allocated_gpu_hours)} "
            f"allocated in the {spec.label}; {percent(series.coverage)} of the allocated hours had a reading."
        )
    story = _story(series, spec)
    if story:
        details.append(story)
    return SeriesView(key=series.key, label=series.label, headline=headline, details=details,
                      chart=utilisation_chart(buckets=chart_buckets(series), title=title, chart_id=chart_id))  # fmt: skip


def utilisation_views(data: ClusterUtilisation) -> tuple[SeriesView, list[SeriesView]]:
    """The page's total and its departments, ready to show."""
    name = data.cluster.display_name or data.cluster.name
    scope = f"cluster {name}" if data.whole_cluster else f"your departments on cluster {name}"
    total = series_view(data.total, data.range, chart_id="chart-total",
                        title=f"GPU-equivalents allocated and busy, {scope}, {data.range.label}")  # fmt: skip
    departments = [
        series_view(series, data.range, chart_id=f"chart-{series.key}",
                    title=f"GPU-equivalents allocated and busy, {series.label}, {data.range.label}")  # fmt: skip
        for series in data.departments
    ]
    return total, departments


def range_links(*, cluster_id: int | None, current: str) -> list[tuple[str, str, bool]]:
    """(label, query string, is current) per range, keeping the cluster."""
    prefix = f"cluster={cluster_id}&" if cluster_id is not None else ""
    return [(label.split(" ")[0], f"?{prefix}range={name}", name == current) for name, label in RANGE_CHOICES]


def chosen_range(value: str | None) -> UtilisationRange:
    return RANGES[value or DEFAULT_RANGE]


@dataclass(frozen=True)
class UsagePanel:
    sparkline: SafeString
    activity: str
    memory: str
    memory_meter: SafeString | None


def allocation_usage_panel(*, user: User, allocation: Allocation) -> UsagePanel | None:
    """The allocation page's last 24 hours of activity and its memory against its share; None for
    an allocation that holds nothing and has no reading (a request, a finished grant)."""
    activity = allocation_activity(user=user, allocation=allocation)
    has_rows = any(value is not None for _at, value in activity.points) or activity.memory_used_bytes is not None
    if not has_rows and allocation.state not in HOLDING_STATES:
        return None
    values = [value for _at, value in activity.points]
    mean = activity.mean_activity
    summary = (f"Mean {percent(mean)} busy over the measured part of the last 24 hours "
               f"({percent(activity.known_share)} of it had a reading)." if mean is not None
               else "No reading in the last 24 hours: use is unknown, not idle.")  # fmt: skip
    chart = sparkline(values=values, title=f"Allocation #{allocation.pk}, activity over the last 24 hours",
                      chart_id=f"spark-{allocation.pk}",
                      labels=[f"{minute_utc(at)}, 5 minutes" for at, _value in activity.points])  # fmt: skip
    used, granted = activity.memory_used_bytes, activity.memory_granted_bytes
    if used is None or not granted or activity.memory_at is None:
        return UsagePanel(sparkline=chart, activity=summary, memory="Memory: no reading.", memory_meter=None)
    text = (f"Memory: {number(used / GIB)} GiB of the {number(granted / GIB)} GiB its share allows "
            f"({percent(activity.memory_ratio)}), at {minute_utc(activity.memory_at)}.")  # fmt: skip
    return UsagePanel(sparkline=chart, activity=summary, memory=text, memory_meter=meter(used=used, total=granted, label=text))


def gpu_map_busy(*, user: User, cluster: Cluster, drawn: GpuMap) -> GpuMap:
    """Mark each GPU of the map with its busy fraction now (unknown where there is no reading)."""
    overlay = gpu_busy_overlay(user=user, cluster_id=cluster.pk)
    for node in drawn.nodes:
        for cell in node.gpus:
            cell.busy = overlay.get((node.name, cell.index), GpuBusy(ratio=None))
    return drawn

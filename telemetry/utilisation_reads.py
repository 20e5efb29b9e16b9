"""Reads for the utilisation charts: GPU-equivalents allocated and used over time on a cluster, in
total and per department, and an allocation's activity over the last day and its memory (each
GPU's busy fraction now, for the GPU map, is ``telemetry.gpu_busy``).

**Allocated** comes from the grants themselves, never from the usage rows, so it is there whether
or not anything was measured. A unit of an allocation is allocated while one of its reservations
is live (``created_at`` .. ``released_at``) and inside the allocation's period (``starts_at`` ..
``ends_at``): the same condition the utilisation tick uses to pick the allocations it measures.
It weighs its flavor's GPU-equivalents. Rows of one unit that overlap (a defragmentation move
releases one row and books the next) count once. A chart bucket's value is the exact mean over
the bucket: the GPU-equivalent-seconds inside it divided by its length. Holding allocations granted
before GPU placement existed have no reservation: they are neither counted nor measured.

**Used** comes from ``AllocationUsage``. For each allocation and 5-minute bucket one row counts: a
known reading before an unknown one, then dcgm-exporter before HAMi before the node agent. The
rows are summed in SQL into the chart's buckets (``EpochBucket``). Per chart bucket: ``used`` is the
mean busy GPU-equivalents, ``known`` the mean allocated GPU-equivalents that had a known reading,
and what was allocated without one (allocated − known) is *unknown*, never idle. A series' ratio is
used over known: the share of the measured allocated GPU-hours that were busy.

**Who sees what** (``tenants.access``): those who read every department (platform admins, an
auditor of the root) see the whole cluster; others see only the departments they read, and their
total is the sum of those; someone without a role gets 404. A chart takes a fixed number of
queries whatever the number of allocations and buckets.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import models
from django.db.models import Exists, OuterRef, Q, QuerySet, Sum
from django.http import Http404

from allocations.models import Allocation, Reservation
from clusters.models import Cluster
from clusters.selectors import cluster_get, sees_every_department
from kernel.clock import clock_now
from telemetry.models import AllocationUsage, UsageSource
from telemetry.samples import EpochBucket
from tenants.access import access_for
from tenants.models import Department

ROW_SECONDS = 300  # one AllocationUsage bucket
SPARKLINE_SPAN = datetime.timedelta(hours=24)

User = AbstractBaseUser | AnonymousUser


@dataclass(frozen=True)
class UtilisationRange:
    name: str
    label: str
    span: datetime.timedelta
    bucket_seconds: int


RANGES: dict[str, UtilisationRange] = {
    spec.name: spec
    for spec in (
        UtilisationRange("day", "last 24 hours", datetime.timedelta(days=1), ROW_SECONDS),
        UtilisationRange("week", "last 7 days", datetime.timedelta(days=7), 3600),
        UtilisationRange("month", "last 30 days", datetime.timedelta(days=30), 86400),
    )
}
DEFAULT_RANGE = "week"


def _epoch(moment: datetime.datetime) -> int:
    return int(moment.timestamp())


def _at(epoch: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)


def range_window(spec: UtilisationRange, *, now: datetime.datetime) -> tuple[datetime.datetime, datetime.datetime]:
    """[start, end): ``end`` is the end of the last 5-minute bucket that has begun to be written
    (``now`` floored to 5 minutes); ``start`` is ``end`` − span floored to the chart's bucket, so
    that every bucket but the last is whole and aligned in UTC."""
    end = _epoch(now) - _epoch(now) % ROW_SECONDS
    start = end - int(spec.span.total_seconds())
    return _at(start - start % spec.bucket_seconds), _at(end)


@dataclass(frozen=True)
class UtilisationBucket:
    """Means over [start, end), in GPU-equivalents."""

    start: datetime.datetime
    end: datetime.datetime
    allocated: float
    known: float  # allocated with a known reading
    used: float  # busy (within the known part)

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    @property
    def unknown(self) -> float:
        return max(0.0, self.allocated - self.known)

    @property
    def measured_used(self) -> float | None:
        """The busy GPU-equivalents, or None when something was allocated and nothing of it read."""
        return None if self.known <= 0 and self.allocated > 0 else self.used


@dataclass(frozen=True)
class UtilisationSeries:
    key: str  # "total" or the department's slug
    label: str
    buckets: tuple[UtilisationBucket, ...]

    def _sums(self, since: datetime.datetime | None = None) -> tuple[float, float, float]:
        allocated = known = used = 0.0
        for bucket in self.buckets:
            if since is None or bucket.start >= since:
                allocated += bucket.allocated * bucket.seconds
                known += bucket.known * bucket.seconds
                used += bucket.used * bucket.seconds
        return allocated, known, used

    @property
    def allocated_gpu_hours(self) -> float:
        return self._sums()[0] / 3600

    @property
    def used_gpu_hours(self) -> float:
        return self._sums()[2] / 3600

    @property
    def ratio(self) -> float | None:
        """Busy over allocated, where known (None: nothing measured)."""
        _allocated, known, used = self._sums()
        return used / known if known > 0 else None

    @property
    def coverage(self) -> float | None:
        """The share of the allocated GPU-hours that had a reading (None: nothing allocated)."""
        allocated, known, _used = self._sums()
        return min(1.0, known / allocated) if allocated > 0 else None

    def ratio_between(self, start: datetime.datetime, end: datetime.datetime) -> float | None:
        known = used = 0.0
        for bucket in self.buckets:
            if start <= bucket.start and bucket.end <= end:
                known += bucket.known * bucket.seconds
                used += bucket.used * bucket.seconds
        return used / known if known > 0 else None

    @property
    def is_empty(self) -> bool:
        return all(bucket.allocated <= 0 and bucket.known <= 0 and bucket.used <= 0 for bucket in self.buckets)


@dataclass(frozen=True)
class ClusterUtilisation:
    cluster: Cluster
    range: UtilisationRange
    start: datetime.datetime
    end: datetime.datetime
    whole_cluster: bool  # False: only the departments the reader reads
    total: UtilisationSeries
    departments: tuple[UtilisationSeries, ...]


def readable_departments(user: User) -> frozenset[int] | None:
    """None: every department (the whole cluster); else the ids the reader reads."""
    access = access_for(user)
    if not access.has_any_role:
        raise Http404("No utilisation to show.")
    return None if sees_every_department(user=user) else access.readable


def _score() -> models.ExpressionWrapper[models.expressions.CombinedExpression]:
    """Which of an allocation's rows for one bucket counts: the highest score wins (a known
    reading first, then dcgm-exporter, HAMi, the node agent)."""
    known = models.Case(models.When(used_gpu_eq__isnull=True, then=models.Value(0)), default=models.Value(10), output_field=models.IntegerField())
    source = models.Case(
        models.When(source=UsageSource.DCGM, then=models.Value(2)), models.When(source=UsageSource.HAMI, then=models.Value(1)),
        default=models.Value(0), output_field=models.IntegerField(),
    )  # fmt: skip
    return models.ExpressionWrapper(known + source, output_field=models.IntegerField())


def chosen_usage() -> QuerySet[AllocationUsage]:
    """The usage rows that count: one per allocation and bucket (module docstring)."""
    better = AllocationUsage.objects.annotate(score=_score()).filter(
        allocation_id=OuterRef("allocation_id"), bucket_start=OuterRef("bucket_start"), score__gt=OuterRef("score")
    )
    return AllocationUsage.objects.annotate(score=_score()).filter(~Exists(better))


def _spread(totals: list[float], *, begin: float, finish: float, origin: float, seconds: int, weight: float) -> None:
    """Add ``weight`` × the seconds of [begin, finish) that fall in each bucket of ``totals``."""
    if finish <= begin:
        return
    first = int((begin - origin) // seconds)
    last = min(len(totals) - 1, int((finish - origin) // seconds) - (1 if (finish - origin) % seconds == 0 else 0))
    if first == last:
        totals[first] += weight * (finish - begin)
        return
    totals[first] += weight * (origin + (first + 1) * seconds - begin)
    totals[last] += weight * (finish - (origin + last * seconds))
    for index in range(first + 1, last):
        totals[index] += weight * seconds


def _merged(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for begin, finish in sorted(intervals):
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], finish))
        else:
            merged.append((begin, finish))
    return merged


def _allocated_seconds(
    *, cluster_id: int, start: datetime.datetime, end: datetime.datetime, seconds: int, count: int,
    departments: frozenset[int] | None,
) -> dict[int, list[float]]:  # fmt: skip
    """GPU-equivalent-seconds allocated per department and chart bucket, from the reservations."""
    rows = Reservation.objects.filter(
        node__cluster_id=cluster_id, created_at__lt=end, allocation__starts_at__lt=end, allocation__ends_at__gt=start,
    ).filter(Q(released_at__isnull=True) | Q(released_at__gt=start))  # fmt: skip
    if departments is not None:
        rows = rows.filter(allocation__project__department_id__in=departments)
    units: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    weights: dict[int, tuple[int, float]] = {}
    low, high = start.timestamp(), end.timestamp()
    for allocation_id, unit, created, released, starts, ends, gpu_eq, department_id in rows.values_list(
        "allocation_id", "unit", "created_at", "released_at", "allocation__starts_at", "allocation__ends_at",
        "allocation__flavor__gpu_equivalents", "allocation__project__department_id",
    ):  # fmt: skip
        begin = max(low, created.timestamp(), starts.timestamp())
        finish = min(high, ends.timestamp(), released.timestamp() if released is not None else high)
        if finish > begin:
            units[(allocation_id, unit)].append((begin, finish))
            weights[allocation_id] = (department_id, float(gpu_eq))
    totals: dict[int, list[float]] = defaultdict(lambda: [0.0] * count)
    for (allocation_id, _unit), intervals in units.items():
        department_id, weight = weights[allocation_id]
        for begin, finish in _merged(intervals):
            _spread(totals[department_id], begin=begin, finish=finish, origin=low, seconds=seconds, weight=weight)
    return totals


def _used_seconds(
    *, cluster_id: int, start: datetime.datetime, end: datetime.datetime, seconds: int, count: int,
    departments: frozenset[int] | None,
) -> dict[int, tuple[list[float], list[float]]]:  # fmt: skip
    """(known, used) GPU-equivalent-seconds per department and chart bucket, summed in SQL."""
    rows = chosen_usage().filter(cluster_id=cluster_id, bucket_start__gte=start, bucket_start__lt=end)
    if departments is not None:
        rows = rows.filter(department_id__in=departments)
    known_granted = models.Case(models.When(used_gpu_eq__isnull=False, then=models.F("granted_gpu_eq")), default=models.Value(0.0),
                         output_field=models.FloatField())  # fmt: skip
    sums = (
        rows.annotate(bucket=EpochBucket("bucket_start", seconds=seconds))
        .values("bucket", "department_id")
        .annotate(known=Sum(known_granted), used=Sum("used_gpu_eq"))
        .order_by()
    )
    origin = _epoch(start)
    totals: dict[int, tuple[list[float], list[float]]] = defaultdict(lambda: ([0.0] * count, [0.0] * count))
    for row in sums:
        index = (int(row["bucket"]) - origin) // seconds
        if 0 <= index < count:
            known, used = totals[row["department_id"]]
            known[index] += float(row["known"] or 0) * ROW_SECONDS
            used[index] += float(row["used"] or 0) * ROW_SECONDS
    return totals


def _series(key: str, label: str, edges: Sequence[tuple[datetime.datetime, datetime.datetime]],
            allocated: Sequence[float], known: Sequence[float], used: Sequence[float]) -> UtilisationSeries:  # fmt: skip
    buckets = []
    for index, (begin, finish) in enumerate(edges):
        length = (finish - begin).total_seconds()
        buckets.append(UtilisationBucket(start=begin, end=finish, allocated=allocated[index] / length,
                                         known=known[index] / length, used=used[index] / length))  # fmt: skip
    return UtilisationSeries(key=key, label=label, buckets=tuple(buckets))


def cluster_utilisation(
    *, user: User, cluster_id: int, range_name: str = DEFAULT_RANGE, now: datetime.datetime | None = None
) -> ClusterUtilisation:
    """Allocated and used GPU-equivalents on the cluster over the range, in total and per
    department (those with anything allocated or measured in it), as the reader may see them."""
    departments = readable_departments(user)
    cluster = cluster_get(user=user, cluster_id=cluster_id)
    spec = RANGES[range_name]
    start, end = range_window(spec, now=now or clock_now())
    seconds = spec.bucket_seconds
    origin, stop = _epoch(start), _epoch(end)
    edges = [(_at(at), _at(min(at + seconds, stop))) for at in range(origin, stop, seconds)]
    allocated = _allocated_seconds(cluster_id=cluster.pk, start=start, end=end, seconds=seconds, count=len(edges),
                                   departments=departments)  # fmt: skip
    used = _used_seconds(cluster_id=cluster.pk, start=start, end=end, seconds=seconds, count=len(edges),
                         departments=departments)  # fmt: skip
    zeros = [0.0] * len(edges)
    names = dict(
        (pk, (slug, name))
        for pk, slug, name in Department.objects.filter(pk__in=set(allocated) | set(used)).values_list("pk", "slug", "name")
    )  # fmt: skip
    series = []
    for department_id, (slug, name) in sorted(names.items(), key=lambda item: item[1][0]):
        known_used = used.get(department_id, (zeros, zeros))
        series.append(_series(slug, f"{name} ({slug})", edges, allocated.get(department_id, zeros), *known_used))
    total = _series(
        "total", cluster.display_name or cluster.name, edges,
        [sum(values) for values in zip(zeros, *allocated.values(), strict=False)],
        [sum(values) for values in zip(zeros, *(pair[0] for pair in used.values()), strict=False)],
        [sum(values) for values in zip(zeros, *(pair[1] for pair in used.values()), strict=False)],
    )  # fmt: skip
    return ClusterUtilisation(
        cluster=cluster, range=spec, start=start, end=end, whole_cluster=departments is None, total=total,
        departments=tuple(item for item in series if not item.is_empty),
    )  # fmt: skip


@dataclass(frozen=True)
class AllocationActivity:
    """An allocation's last 24 hours, per 5-minute bucket: activity 0..1, None = no reading."""

    start: datetime.datetime
    end: datetime.datetime
    points: tuple[tuple[datetime.datetime, float | None], ...]
    memory_used_bytes: int | None
    memory_granted_bytes: int | None
    memory_at: datetime.datetime | None  # the end of the bucket the memory figures are from

    @property
    def known(self) -> list[float]:
        return [value for _at_, value in self.points if value is not None]

    @property
    def mean_activity(self) -> float | None:
        known = self.known
        return sum(known) / len(known) if known else None

    @property
    def known_share(self) -> float:
        return len(self.known) / len(self.points) if self.points else 0.0

    @property
    def memory_ratio(self) -> float | None:
        if self.memory_used_bytes is None or not self.memory_granted_bytes:
            return None
        return self.memory_used_bytes / self.memory_granted_bytes


def allocation_activity(*, user: User, allocation: Allocation, now: datetime.datetime | None = None) -> AllocationActivity:
    """The allocation's activity over the last 24 hours and its newest memory reading (one query)."""
    if not access_for(user).can_read_department(allocation.project.department_id):
        raise Http404("No such allocation.")
    moment = now or clock_now()
    end = _at(_epoch(moment) - _epoch(moment) % ROW_SECONDS)
    start = end - SPARKLINE_SPAN
    rows = chosen_usage().filter(allocation_id=allocation.pk, bucket_start__gte=start, bucket_start__lt=end)
    found: dict[int, float | None] = {}
    memory: tuple[datetime.datetime, int, int | None] | None = None
    for bucket_start, activity, used, granted in rows.values_list(
        "bucket_start", "activity", "memory_used_bytes", "memory_granted_bytes"
    ).order_by("bucket_start"):
        found[_epoch(bucket_start)] = activity
        if used is not None:
            memory = (bucket_start, used, granted)
    origin = _epoch(start)
    points = tuple((_at(at), found.get(at)) for at in range(origin, _epoch(end), ROW_SECONDS))
    return AllocationActivity(
        start=start, end=end, points=points,
        memory_used_bytes=memory[1] if memory else None, memory_granted_bytes=memory[2] if memory else None,
        memory_at=memory[0] + datetime.timedelta(seconds=ROW_SECONDS) if memory else None,
    )  # fmt: skip

"""``usage_hours_roll``: the ``UsageHour`` rows of a range of UTC hours, made again whole.

For every allocation that held GPUs in an hour: **granted** is the seconds its units were live
(a reservation between ``created_at`` and ``released_at``, inside the allocation's ``starts_at`` ..
``ends_at``; one unit's overlapping rows, as a defragmentation move leaves them, count once) times
its flavor's GPU-equivalents; **measured** and **used** come from its 5-minute utilisation rows
(``telemetry.utilisation_reads.chosen_usage``: one row per bucket, a known reading first) whose
bucket starts in the hour: a known row adds its granted GPU-equivalents × 5 minutes to measured and
its busy GPU-equivalents × 5 minutes to used. Measured is capped at granted and used at measured.
Buckets are aligned to 5 minutes, so each falls in exactly one hour.

A roll replaces the range's rows in one transaction under an advisory lock (two rolls of the
same hours never interleave; SQLite's write transaction already excludes them): re-rolling an
hour after late data arrived gives the rows the data now says, and rolling it again without new
data gives the same rows. In the same transaction the ``UsageDay`` rows of every day the range
touches are summed again from all of the day's hours (``usage_days_refresh``), so a day always
equals the sum of its hours and the usage API reads a month of a department in a few rows. Only hours that have ended by ``now`` are rolled. Nothing here is
audited: the rows are derived from audited grants and from measurements, and can be made again at
any time (a statement, once closed, keeps its own copy of its lines).
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.db import transaction
from django.db.models import Sum
from django.db.models.functions import TruncDay

from accounting import conf
from accounting.hours import HOUR, as_decimal, day_floor, gpu_hours, hour_floor, hours_in, seconds_by_hour
from accounting.models import UsageDay, UsageHour
from allocations.catalogue.selectors import reservations_held_between
from kernel.clock import clock_now
from kernel.intervals import Interval
from kernel.locks import advisory_xact_lock, references_key_share
from telemetry.utilisation_reads import ROW_SECONDS, chosen_usage

ROLL_LOCK_ID = 0x6770_7561_6363_0001  # pg_advisory_xact_lock key of the usage roll-up
DAY = datetime.timedelta(days=1)
_ROW_SECONDS = Decimal(ROW_SECONDS)


@dataclass(frozen=True)
class RollOutcome:
    start: datetime.datetime
    end: datetime.datetime
    hours: int
    rows: int
    allocations: int

    def as_dict(self) -> dict[str, object]:
        return {
            "start": self.start.isoformat(), "end": self.end.isoformat(), "hours": self.hours, "rows": self.rows,
            "allocations": self.allocations,
        }  # fmt: skip


@dataclass(frozen=True)
class _Grant:
    cluster_id: int
    department_id: int
    project_id: int
    flavor_id: int
    gpu_equivalents: Decimal


def usage_hours_roll(
    *, start: datetime.datetime, end: datetime.datetime, now: datetime.datetime | None = None
) -> RollOutcome:
    """Make the ``UsageHour`` rows of the UTC hours in [start, end) again (``start`` floored to its
    hour, ``end`` to the last hour that has ended by ``now``)."""
    now = now or clock_now()
    start, end = hour_floor(start), min(hour_floor(end), hour_floor(now))
    if end <= start:
        return RollOutcome(start=start, end=max(start, end), hours=0, rows=0, allocations=0)
    with transaction.atomic():
        advisory_xact_lock(transaction.get_connection(), ROLL_LOCK_ID)
        grants, granted = _granted_seconds(start, end)
        measured, used = _measured_seconds(start, end)
        rows = []
        for (allocation_id, hour), held in sorted(granted.items()):
            grant = grants[allocation_id]
            held_hours = gpu_hours(held)
            measured_hours = min(held_hours, gpu_hours(measured.get((allocation_id, hour), Decimal(0))))
            used_hours = min(measured_hours, gpu_hours(used.get((allocation_id, hour), Decimal(0))))
            rows.append(UsageHour(
                allocation_id=allocation_id, hour=hour, cluster_id=grant.cluster_id, department_id=grant.department_id,
                project_id=grant.project_id, flavor_id=grant.flavor_id, granted=held_hours, measured=measured_hours,
                used=used_hours, rolled_at=now,
            ))  # fmt: skip
        UsageHour.objects.filter(hour__gte=start, hour__lt=end).delete()
        UsageHour.objects.bulk_create(rows, batch_size=2000)
        usage_days_refresh(start=start, end=end, hours=rows)
    return RollOutcome(start=start, end=end, hours=len(hours_in(start, end)), rows=len(rows), allocations=len(grants))


_LIVE_FIELDS = (
    "allocation_id", "unit", "allocation__cluster_id", "allocation__project__department_id", "allocation__project_id",
    "allocation__flavor_id", "allocation__flavor__gpu_equivalents",
)  # fmt: skip


def _granted_seconds(
    start: datetime.datetime, end: datetime.datetime
) -> tuple[dict[int, _Grant], dict[tuple[int, datetime.datetime], Decimal]]:
    """Each allocation that held something in [start, end), and its GPU-equivalent-seconds per hour."""
    units: dict[tuple[int, int], list[Interval]] = defaultdict(list)
    grants: dict[int, _Grant] = {}
    for begin, finish, values in reservations_held_between(start=start, end=end, fields=_LIVE_FIELDS):
        allocation_id, unit, cluster_id, department_id, project_id, flavor_id, gpu_eq = values
        units[(allocation_id, unit)].append((begin, finish))
        grants[allocation_id] = _Grant(cluster_id, department_id, project_id, flavor_id, Decimal(gpu_eq))
    granted: dict[tuple[int, datetime.datetime], Decimal] = defaultdict(Decimal)
    for (allocation_id, _unit), intervals in units.items():
        weight = grants[allocation_id].gpu_equivalents
        for hour, held in seconds_by_hour(intervals, start=start, end=end).items():
            granted[(allocation_id, hour)] += held * weight
    return grants, dict(granted)


def _measured_seconds(
    start: datetime.datetime, end: datetime.datetime
) -> tuple[dict[tuple[int, datetime.datetime], Decimal], dict[tuple[int, datetime.datetime], Decimal]]:
    """(measured, used) GPU-equivalent-seconds per allocation and hour, from the usage rows."""
    measured: dict[tuple[int, datetime.datetime], Decimal] = defaultdict(Decimal)
    used: dict[tuple[int, datetime.datetime], Decimal] = defaultdict(Decimal)
    rows = chosen_usage().filter(bucket_start__gte=start, bucket_start__lt=end, used_gpu_eq__isnull=False)
    for allocation_id, bucket_start, granted_gpu_eq, used_gpu_eq in rows.values_list(
        "allocation_id", "bucket_start", "granted_gpu_eq", "used_gpu_eq"
    ):
        key = (allocation_id, hour_floor(bucket_start))
        measured[key] += as_decimal(granted_gpu_eq) * _ROW_SECONDS
        used[key] += as_decimal(max(0.0, used_gpu_eq or 0.0)) * _ROW_SECONDS
    return dict(measured), dict(used)


def usage_days_refresh(*, start: datetime.datetime, end: datetime.datetime, hours: Sequence[UsageHour] = ()) -> int:
    """Sum again the ``UsageDay`` rows of every UTC day that [start, end) touches, from all of its
    hours (those rolled before included); call it in the transaction that rolled the ``hours``.

    Before the days are written, the rows that the new hours and days refer to (grants,
    departments, projects, flavors, clusters) are locked FOR KEY SHARE in the global lock order
    (``kernel.locks.references_key_share``): PostgreSQL would take those locks at COMMIT in the
    order the rows were written, and a roll that held a cluster's while it waited for a department
    an approval held FOR UPDATE deadlocked with that approval, which waited for the cluster."""
    first = day_floor(start)
    last = day_floor(end - HOUR) + DAY
    keys = ("day", "department_id", "project_id", "flavor_id", "cluster_id")
    grouped = (
        UsageHour.objects.filter(hour__gte=first, hour__lt=last).annotate(day=TruncDay("hour", tzinfo=datetime.UTC))
        .values(*keys).annotate(granted_sum=Sum("granted"), measured_sum=Sum("measured"), used_sum=Sum("used"))
        .order_by(*keys)
    )  # fmt: skip
    days = [
        UsageDay(day=item["day"], department_id=item["department_id"], project_id=item["project_id"],
                 flavor_id=item["flavor_id"], cluster_id=item["cluster_id"], granted=item["granted_sum"],
                 measured=item["measured_sum"], used=item["used_sum"])  # fmt: skip
        for item in grouped
    ]
    references_key_share(transaction.get_connection(), [*hours, *days])
    UsageDay.objects.filter(day__gte=first, day__lt=last).delete()
    UsageDay.objects.bulk_create(days, batch_size=2000)
    return len(days)


def usage_hours_roll_recent(*, now: datetime.datetime | None = None) -> RollOutcome:
    """The hours that ended within ``GPUPORTAL_ACCOUNTING_LATE_HOURS`` of ``now``: late utilisation
    rows (a Prometheus that answered late, an agent that caught up) are counted when they come."""
    now = now or clock_now()
    end = hour_floor(now)
    return usage_hours_roll(start=end - conf.late_margin(), end=end, now=now)

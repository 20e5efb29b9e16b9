"""A week of utilisation history for the demo's grants, so that ``make run`` opens the utilisation
page, the allocation pages' sparklines and the GPU map's overlay with something to show.

The story (DESIGN.md's): the cluster starts the week with about 30 % of its allocated
GPU-equivalents busy and ends it above 80 %, as the departments move their work onto the shares
they were granted. Each demo grant has a profile (when it started, how busy it was at first and at
the end); between the two its activity follows a smooth ramp with a working-day rhythm and a little
noise from a seeded generator, so every run writes the same numbers. One node's readings stop for
two hours on the third day (an agent restart): those buckets are unknown, not idle. The notebook
has sat idle for the last three and a half hours (``demo.idle`` finds it).

Released grants (``demo.history``) get rows from their start to their release. The grants on the
cluster began at their profile's start (``demo_usage_start``: ``demo.grants`` approves them then),
so that what was allocated over the week comes from the grants, as the charts compute it; a grant
that began later is dated back to it (its period, approval time and reservations). Written once:
nothing happens when any demo grant already has a utilisation row (the utilisation tick's rows
included).
"""

from __future__ import annotations

import datetime
import math
import random
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Max

from allocations.catalogue.states import ON_CLUSTER_STATES
from allocations.models import Allocation, AllocationState, Reservation
from kernel.clock import clock_now
from telemetry.models import AllocationUsage, UsageSource

BUCKET = datetime.timedelta(minutes=5)
WEEK = datetime.timedelta(days=7)
MIB = 1024 * 1024
SEED = 16


@dataclass(frozen=True)
class Profile:
    started_days_ago: float
    first: float  # activity at the start
    last: float  # activity at the end of the week
    memory: float  # the share of its memory it fills when busy
    idle_hours: float = 0.0  # the last hours of the week spent idle (a notebook left open)


# By the demo grant's justification (demo/grants.py); others get DEFAULT.
PROFILES: dict[str, Profile] = {
    "Segmentation model training": Profile(7, 0.35, 0.92, 0.85),
    "Hyper-parameter sweep": Profile(6, 0.12, 0.86, 0.6),
    "Inference experiments (borrowed capacity)": Profile(3, 0.45, 0.78, 0.45),
    "Fine-tuning runs": Profile(7, 0.30, 0.84, 0.9),
    "Interactive notebook for data exploration": Profile(2, 0.45, 0.35, 0.3, idle_hours=3.5),
    "Inference service for the annotation tool": Profile(5, 0.40, 0.90, 0.5),
    # Released grants (demo.history): busy while they ran, their period ends at their release.
    "Tokeniser sweeps on small MIG slices": Profile(9, 0.25, 0.50, 0.6),
    "Annotation tool demos on shared H100s": Profile(8, 0.30, 0.45, 0.4),
    "Baseline reproduction": Profile(10, 0.30, 0.60, 0.8),
}
DEFAULT = Profile(5, 0.3, 0.8, 0.5)
OUTAGE = (datetime.timedelta(days=4, hours=10), datetime.timedelta(days=4, hours=12))  # before the end
DEMO_CLUSTER = "demo"


def _floor(moment: datetime.datetime) -> datetime.datetime:
    epoch = int(moment.timestamp())
    return datetime.datetime.fromtimestamp(epoch - epoch % int(BUCKET.total_seconds()), tz=datetime.UTC)


def demo_usage_start(justification: str, now: datetime.datetime) -> datetime.datetime:
    """When the grant of this justification begins its week of readings (its profile's start,
    on a bucket's edge): ``demo.grants`` starts it then."""
    profile = PROFILES.get(justification, DEFAULT)
    return _floor(_floor(now) - datetime.timedelta(days=profile.started_days_ago))


def _activity(profile: Profile, *, progress: float, hour: int, rng: random.Random) -> float:
    """The ramp from ``first`` to ``last`` (smoothstep over the grant's life), busier in UTC working hours."""
    ramp = progress * progress * (3 - 2 * progress)
    level = profile.first + (profile.last - profile.first) * ramp
    rhythm = 1 + 0.12 * math.sin((hour - 9) / 24 * 2 * math.pi)
    return min(1.0, max(0.0, level * rhythm + rng.uniform(-0.05, 0.05)))


def _date_back(allocation: Allocation, since: datetime.datetime) -> None:
    """Move the grant's start, approval and bookings back to ``since`` (never forward)."""
    if allocation.starts_at > since:
        Allocation.objects.filter(pk=allocation.pk).update(
            starts_at=since, created_at=min(allocation.created_at, since),
            decided_at=since if allocation.decided_at is not None else None,
        )  # fmt: skip
        allocation.starts_at = since
    Reservation.objects.filter(allocation=allocation, created_at__gt=since).update(created_at=since)


def _row(grant: Allocation, profile: Profile, *, at: datetime.datetime, activity: float | None) -> AllocationUsage:
    """The demo's dcgm-exporter reading of ``grant`` for the bucket from ``at``."""
    assert grant.cluster_id is not None  # filtered on the demo cluster
    granted = float(grant.flavor.gpu_equivalents) * grant.quantity
    memory = grant.flavor.memory_mib * MIB * grant.quantity
    return AllocationUsage(
        allocation=grant, cluster_id=grant.cluster_id, department_id=grant.project.department_id,
        bucket_start=at, source=UsageSource.DCGM, devices=grant.quantity if activity is not None else 0,
        coverage=1.0 if activity is not None else 0.2, activity=activity, granted_gpu_eq=granted,
        used_gpu_eq=round(activity * granted, 6) if activity is not None else None,
        memory_used_bytes=int(memory * profile.memory * (0.4 + 0.6 * activity)) if activity is not None else None,
        memory_granted_bytes=memory,
    )


def demo_usage_seed(*, now: datetime.datetime | None = None) -> int:
    """Write the week's rows for the demo cluster's grants on the cluster and its released ones;
    returns how many were written. (A scheduled grant has not started: it has no history.)"""
    grants = list(
        Allocation.objects.filter(cluster__name=DEMO_CLUSTER, reservations__isnull=False,
                                  state__in=[*ON_CLUSTER_STATES, AllocationState.RELEASED])
        .select_related("flavor", "project").distinct().order_by("pk")
    )  # fmt: skip
    if not grants or AllocationUsage.objects.filter(allocation__in=grants).exists():
        return 0
    end = _floor(now or clock_now())
    rng = random.Random(SEED)
    outage_node = min(grant.reservations.values_list("node_id", flat=True).first() or 0 for grant in grants)
    rows: list[AllocationUsage] = []
    with transaction.atomic():
        for grant in grants:
            profile = PROFILES.get(grant.justification, DEFAULT)
            until = end
            if grant.state == AllocationState.RELEASED:
                since = _floor(grant.starts_at)
                released = [row.released_at for row in grant.reservations.all() if row.released_at is not None]
                until = _floor(max(released)) if released else end
            else:
                since = demo_usage_start(grant.justification, end)
                _date_back(grant, since)
            on_outage_node = grant.reservations.filter(node_id=outage_node).exists()
            life = max((until - since).total_seconds(), 1.0)
            at = since
            while at < until:
                if on_outage_node and end - OUTAGE[1] <= at < end - OUTAGE[0]:
                    activity = None
                elif until - at <= datetime.timedelta(hours=profile.idle_hours):
                    activity = round(rng.uniform(0.0, 0.02), 4)  # open, holding its share, computing nothing
                else:
                    progress = (at - since).total_seconds() / life
                    activity = _activity(profile, progress=progress, hour=at.hour, rng=rng)
                rows.append(_row(grant, profile, at=at, activity=activity))
                at += BUCKET
        AllocationUsage.objects.bulk_create(rows, batch_size=2000)
    return len(rows)


def demo_usage_continue(*, now: datetime.datetime | None = None) -> int:
    """Go on reading the demo cluster's grants as time passes: for each grant holding GPUs there, the
    buckets since its last row (at most a week back) up to the last one that has ended, at the
    level its profile ends the week on (the notebook stays idle); returns how many rows were written.

    The seed's week ends when it ran, and nothing else measures the demo cluster (no exporter, no
    node agent): without this, the GPU map, which reads the newest bucket of the last 15 minutes,
    showed "busy: unknown" on every GPU a quarter of an hour after ``make run`` (and on any later
    run), and the charts' last hours were unknown. ``make run``'s clock runs it every five minutes
    (``GPUPORTAL_DEMO_READINGS``, gpuportal/periodic.py); ``seed_demo`` runs it once.
    """
    end = _floor(now or clock_now())
    grants = list(
        Allocation.objects.filter(cluster__name=DEMO_CLUSTER, state__in=ON_CLUSTER_STATES, starts_at__lt=end,
                                  reservations__released_at__isnull=True)
        .select_related("flavor", "project").distinct().order_by("pk")
    )  # fmt: skip
    last = dict(
        AllocationUsage.objects.filter(allocation__in=grants, source=UsageSource.DCGM).order_by()
        .values_list("allocation_id").annotate(last=Max("bucket_start"))
    )  # fmt: skip
    rows: list[AllocationUsage] = []
    for grant in grants:
        profile = PROFILES.get(grant.justification, DEFAULT)
        since = max(_floor(grant.starts_at), end - WEEK)
        at = max(since, last[grant.pk] + BUCKET) if grant.pk in last else since
        until = min(end, _floor(grant.ends_at))
        while at < until:
            rng = random.Random(f"{SEED}:{grant.pk}:{int(at.timestamp())}")  # the same numbers on every run
            idle = profile.idle_hours > 0
            activity = round(rng.uniform(0.0, 0.02), 4) if idle else _activity(profile, progress=1.0, hour=at.hour, rng=rng)
            rows.append(_row(grant, profile, at=at, activity=activity))
            at += BUCKET
    AllocationUsage.objects.bulk_create(rows, batch_size=2000, ignore_conflicts=True)
    return len(rows)

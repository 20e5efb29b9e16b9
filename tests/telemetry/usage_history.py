"""Grants with a past and their utilisation rows, for the utilisation reads and pages."""

from __future__ import annotations

import datetime

from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, Reservation
from telemetry.models import AllocationUsage, UsageSource
from tests.conftest import World

FIVE = datetime.timedelta(minutes=5)
HOUR = datetime.timedelta(hours=1)


def aligned_now() -> datetime.datetime:
    """Now, floored to the hour (so that day, week and month buckets start on round times)."""
    now = timezone.now()
    return now.replace(minute=0, second=0, microsecond=0)


def grant(world: World, *, since: datetime.datetime, flavor: str = "a100", quantity: int = 1, project: str = "llm",
          days: int = 40, until: datetime.datetime | None = None) -> Allocation:  # fmt: skip
    """A grant approved through the services (booked on GPUs), then dated back to ``since`` (and its
    period ended at ``until``, so that what it held does not depend on when the test reads it)."""
    requester, admin = {"seg": ("vision_member", "vision_admin"), "speech_project": ("speech_member", "nlp_admin")}.get(
        project, ("nlp_member", "nlp_admin")
    )
    start = timezone.now()
    allocation = services.allocation_request(
        actor=world.users[requester], project=getattr(world, project), flavor=getattr(world, flavor),
        quantity=quantity, priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=days),
        justification="utilisation tests",
    )  # fmt: skip
    services.allocation_approve(actor=world.users[admin], allocation_id=allocation.pk)
    Allocation.objects.filter(pk=allocation.pk).update(starts_at=since, **({"ends_at": until} if until else {}))
    Reservation.objects.filter(allocation=allocation).update(created_at=since)
    allocation.refresh_from_db()
    return allocation


def usage(allocation: Allocation, *, at: datetime.datetime, activity: float | None, source: str = UsageSource.DCGM,
          granted: float | None = None, memory_used: int | None = None, memory_granted: int | None = None
          ) -> AllocationUsage:  # fmt: skip
    weight = granted if granted is not None else float(allocation.flavor.gpu_equivalents) * allocation.quantity
    assert allocation.cluster_id is not None
    return AllocationUsage.objects.create(
        allocation=allocation, cluster_id=allocation.cluster_id, department_id=allocation.project.department_id,
        bucket_start=at, source=source, devices=allocation.quantity, coverage=1.0 if activity is not None else 0.1,
        activity=activity, granted_gpu_eq=weight, used_gpu_eq=activity * weight if activity is not None else None,
        memory_used_bytes=memory_used, memory_granted_bytes=memory_granted,
    )  # fmt: skip


def fill(allocation: Allocation, *, start: datetime.datetime, end: datetime.datetime, activity: float | None,
         source: str = UsageSource.DCGM) -> int:  # fmt: skip
    """One row per 5-minute bucket in [start, end)."""
    weight = float(allocation.flavor.gpu_equivalents) * allocation.quantity
    assert allocation.cluster_id is not None
    rows = []
    at = start
    while at < end:
        rows.append(AllocationUsage(
            allocation=allocation, cluster_id=allocation.cluster_id, department_id=allocation.project.department_id,
            bucket_start=at, source=source, devices=allocation.quantity, coverage=1.0, activity=activity,
            granted_gpu_eq=weight, used_gpu_eq=activity * weight if activity is not None else None,
        ))  # fmt: skip
        at += FIVE
    AllocationUsage.objects.bulk_create(rows)
    return len(rows)

"""The portal's own database as the twin's sources (docs/twin.md, "Sources"): its history as a
workload, its inventory as clusters, its quotas and priority classes as a policy.

Written to the twin's own formats (``twin.workload.Job``, ``placement.Node``, ``twin.policy.Policy``),
so that ``manage.py twin_export`` writes files ``bench/twin.py`` reads, and a what-if replays the
same values.

The history of a window ``[now - days, now)``:

* every allocation request made in the window is one request of the workload, submitted when it
  was made; a grant that was made before the window and still held GPUs at its start arrives at 0
  with what was left of its run;
* a grant that ran: its runtime from its bookings (the first booked at or after its start to the
  last released, or to now while it holds); a request that never ran (rejected, still pending)
  is demand the portal turned away or has not decided: it runs the period it asked for; a request
  withdrawn before it ran, and one asked to start after now, are left out;
* ``busy``: the mean of its telemetry readings' activity where any were recorded, else
  ``DEFAULT_BUSY``;
* ``starts_at``: the start it asked for when that is later than its submission (scheduled).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Avg, Count, Max, Min, Q

from allocations.models import Allocation, AllocationState, Flavor, PriorityClass, Quota, Reservation, SharingMode
from clusters.models import Gpu as GpuRow
from clusters.models import Node as NodeRow
from clusters.models import NodeSharing
from placement import Gpu, Node, geometry_for_model
from telemetry.models import AllocationUsage
from tenants.models import Department
from twin.mig import MigAskError
from twin.policy import Department as TwinDepartment
from twin.policy import FlavorQuota, Policy
from twin.policy import PriorityClass as TwinClass
from twin.workload import GPU_MILLI, Job, Shape, mig_shape

DEFAULT_BUSY = 0.5  # where a grant has no telemetry reading: half busy (docs/twin.md)
MIN_RUNTIME_S = 60.0
NEVER_RAN = (AllocationState.REJECTED, AllocationState.PENDING)
LEFT_OUT = (AllocationState.CANCELLED, AllocationState.FAILED)


def flavor_shape(flavor: Flavor) -> Shape:
    """One unit of the flavor as the twin places it: a MIG flavor one instance of its profile
    weighing the flavor's GPU-equivalents (on the MIG nodes of ``inventory_nodes``; a share of one
    GPU where no MIG geometry of its model has the profile); whole GPUs for a flavor of one or more
    whole GPU-equivalents, else a share of one GPU (its GPU-equivalents in thousandths)."""
    equivalents = Decimal(flavor.gpu_equivalents)
    models = frozenset({flavor.gpu_model}) if flavor.gpu_model else frozenset()
    if flavor.sharing_mode == SharingMode.MIG and flavor.mig_profile:
        try:
            mig_shape(flavor.mig_profile, models)  # the profile exists on the model
        except MigAskError:
            pass
        else:
            return Shape(1, int((equivalents * GPU_MILLI).to_integral_value()), models, flavor.mig_profile, equivalents)
    if flavor.sharing_mode == SharingMode.EXCLUSIVE or (equivalents >= 1 and equivalents == int(equivalents)):
        return Shape(max(1, int(equivalents)), GPU_MILLI, models)
    return Shape(1, min(GPU_MILLI, max(1, round(equivalents * GPU_MILLI))), models)


def flavor_shapes() -> dict[str, Shape]:
    return {flavor.name: flavor_shape(flavor) for flavor in Flavor.objects.order_by("name")}


def _inventory_gpu(gpu: GpuRow, *, mig_node: bool) -> Gpu:
    """A GPU of the inventory: in MIG mode on a node offering MIG partitions (the mixed strategy,
    ``NodeSharing.MIG``) where its model and memory have a MIG geometry, else in shared mode."""
    geometry = geometry_for_model(gpu.model, gpu.memory_mib) if mig_node and gpu.mig_capable else None
    return Gpu(gpu.index, gpu.model, mig_geometry=geometry.name if geometry is not None else None)


def inventory_nodes() -> list[Node]:
    """The schedulable nodes of the active clusters that have GPUs, named ``cluster/node``; the
    GPUs of a node offering MIG partitions in MIG mode (``_inventory_gpu``)."""
    rows = (NodeRow.objects.filter(cluster__is_active=True, is_schedulable=True)
            .select_related("cluster").prefetch_related("gpus").order_by("cluster__name", "name"))
    nodes = []
    for row in rows:
        mig_node = row.sharing == NodeSharing.MIG
        gpus = tuple(_inventory_gpu(gpu, mig_node=mig_node) for gpu in sorted(row.gpus.all(), key=lambda gpu: gpu.index))
        if gpus:
            nodes.append(Node(f"{row.cluster.name}/{row.name}", row.cpu_millicores, row.memory_mib, gpus))
    return nodes


@dataclass(frozen=True)
class QuotaRow:
    """A quota as the twin reads it; ``equivalents``: GPU-equivalents of one unit of its flavor
    (1 for a quota in GPU-equivalents)."""

    id: int
    department: str
    flavor: str | None
    equivalents: Decimal
    guarantee: Decimal
    limit: Decimal


def quota_rows() -> list[QuotaRow]:
    return [QuotaRow(quota.pk, quota.department.slug, quota.flavor.name if quota.flavor else None,
                     Decimal(quota.flavor.gpu_equivalents) if quota.flavor else Decimal(1), quota.guaranteed, quota.limit)
            for quota in Quota.objects.select_related("department", "flavor").order_by("id")]


def class_rows() -> list[TwinClass]:
    return [TwinClass(pc.name, pc.value, pc.preemption_policy == "PreemptLowerPriority", Decimal(pc.oversubscription_factor),
                      0.0 if pc.preemptible else 60.0 * pc.notice_minutes)
            for pc in PriorityClass.objects.order_by("-value", "name")]


UNBOUNDED = Decimal(1_000_000)  # the limit of a department the portal checks no quota at


def _unchecked(name: str, parents: Mapping[str, str | None], with_quota: set[str]) -> bool:
    """Whether the portal checks no quota at a department without one of its own: one with
    sub-departments, or one below a department with a quota (only the chain's quotas are checked);
    a leaf with no quota on its chain is refused (limit 0)."""
    if name in parents.values():
        return True
    current = parents.get(name)
    while current is not None:
        if current in with_quota:
            return True
        current = parents.get(current)
    return False


def policy_build(*, departments: list[str], quotas: list[QuotaRow], classes: list[TwinClass],
                 flavors: dict[str, Shape], parents: Mapping[str, str | None] | None = None) -> Policy:
    """The twin's policy: each department's quota in GPU-equivalents, or, where it has none, the
    sum of its flavors' quotas in GPU-equivalents; a department with neither is not limited where
    the portal checks nothing at it (``_unchecked``), else limited to 0. Its flavors' quotas are
    checked besides, each in units of its flavor, as the portal checks them. ``parents``: each
    department's parent (its quota binds it too; none: a flat policy)."""
    parents = parents or {}
    with_quota = {row.department for row in quotas}
    built = []
    for name in departments:
        own = [row for row in quotas if row.department == name]
        total = next((row for row in own if row.flavor is None), None)
        if total is not None:
            guarantee, limit = total.guarantee, total.limit
        elif not own and _unchecked(name, parents, with_quota):
            guarantee, limit = Decimal(0), UNBOUNDED
        else:
            guarantee = sum((row.guarantee * row.equivalents for row in own), Decimal(0))
            limit = sum((row.limit * row.equivalents for row in own), Decimal(0))
        parent = parents.get(name)
        flavored = tuple(FlavorQuota(row.flavor, row.guarantee, row.limit) for row in own if row.flavor is not None)
        built.append(TwinDepartment(name, guarantee, max(limit, guarantee),
                                    parent=parent if parent in departments else None, flavor_quotas=flavored))
    return Policy(tuple(built), {c.name: c for c in classes}, flavors)


def department_names() -> list[str]:
    return list(Department.objects.order_by("slug").values_list("slug", flat=True))


def department_parents() -> dict[str, str | None]:
    """Each department's parent, by slug (the portal's tree)."""
    return dict(Department.objects.values_list("slug", "parent__slug"))


def live_policy() -> Policy:
    """The quotas and priority classes in force, as the twin's policy (its departments nested as
    the portal's are)."""
    return policy_build(departments=department_names(), quotas=quota_rows(), classes=class_rows(),
                        flavors=flavor_shapes(), parents=department_parents())


def _busy_by_allocation(ids: list[int]) -> dict[int, float]:
    rows = (AllocationUsage.objects.filter(allocation_id__in=ids, activity__isnull=False)
            .values("allocation_id").annotate(mean=Avg("activity")).order_by())
    return {row["allocation_id"]: min(1.0, max(0.0, float(row["mean"]))) for row in rows}


def _ran(allocation: Allocation, now: datetime.datetime) -> tuple[datetime.datetime, datetime.datetime] | None:
    """When the grant really held GPUs (its bookings), or None if it never did."""
    first = getattr(allocation, "booked_first", None)
    if first is None:
        return None
    begun = max(allocation.starts_at, first)
    open_ = getattr(allocation, "booked_open", 0)
    ended = now if open_ else (getattr(allocation, "booked_last", None) or now)
    return (begun, min(ended, now)) if begun < now else None


def _seconds(delta: datetime.timedelta) -> float:
    return delta.total_seconds()


def history_workload(*, days: float, now: datetime.datetime) -> list[Job]:
    """The requests of the last ``days`` days before ``now`` (see the module's docstring)."""
    start = now - datetime.timedelta(days=days)
    held_then = Reservation.objects.filter(Q(released_at__isnull=True) | Q(released_at__gt=start)).values("allocation_id")
    rows = (Allocation.objects.exclude(state__in=LEFT_OUT).filter(created_at__lt=now)
            .filter(Q(created_at__gte=start) | Q(id__in=held_then))
            .select_related("project__department", "flavor", "priority_class")
            .annotate(booked_first=Min("reservations__created_at"), booked_last=Max("reservations__released_at"),
                      booked_open=Count("reservations", filter=Q(reservations__released_at__isnull=True)))
            .order_by("created_at", "id"))
    allocations = list(rows)
    busy = _busy_by_allocation([a.pk for a in allocations])
    shapes: dict[str, Shape] = {}
    jobs: list[Job] = []
    for allocation in allocations:
        job = _job(allocation, start=start, now=now, line=len(jobs) + 1, busy=busy.get(allocation.pk, DEFAULT_BUSY),
                   shapes=shapes)
        if job is not None:
            jobs.append(job)
    return sorted(jobs, key=lambda job: (job.submit_at, job.line))


def _job(allocation: Allocation, *, start: datetime.datetime, now: datetime.datetime, line: int, busy: float,
         shapes: dict[str, Shape]) -> Job | None:
    flavor = allocation.flavor
    shape = shapes.setdefault(flavor.name, flavor_shape(flavor))
    asked_end = allocation.original_ends_at or allocation.ends_at
    requested = max(MIN_RUNTIME_S, _seconds(asked_end - allocation.starts_at))
    ran = _ran(allocation, now)
    if ran is not None:
        begun, ended = ran
        if ended <= start:
            return None
        submitted = allocation.created_at
        if submitted < start:  # held GPUs when the window began: what was left of its run, from 0
            submitted, begun = start, max(begun, start)
        runtime = max(MIN_RUNTIME_S, _seconds(ended - begun))
    elif allocation.state in NEVER_RAN and allocation.created_at >= start:
        submitted, runtime = allocation.created_at, requested
    else:
        return None
    asked_start = allocation.starts_at if allocation.starts_at > submitted + datetime.timedelta(minutes=1) else None
    if asked_start is not None and asked_start >= now:
        return None  # asked to start after the window: not yet demand of it
    return Job(line=line, submit_at=_seconds(submitted - start), department=allocation.project.department.slug,
               project=allocation.project.slug, shape=shape, quantity=allocation.quantity, runtime_s=runtime,
               requested_s=max(requested, runtime), priority_class=allocation.priority_class.name, busy=round(busy, 4),
               flavor=flavor.name, starts_at=None if asked_start is None else _seconds(asked_start - start))

"""Defragmentation plans: re-place the units of allocations that have not started, so that
fewer GPUs are left partly used.

Only units no workload can be using are moved: allocations still ``approved`` (provisioning has
not begun) or whose start lies ahead. A plan re-places all of them from scratch, largest units
first, on the cluster as the other reservations leave it, with our default policy and with
best-fit, and keeps whichever strands less capacity; it is proposed only when it beats the
current layout. A unit whose old place is also one of its allocation's new places stays put, so
a plan moves no more units than it must.

Applying locks the movable allocations (primary-key order) and then the cluster, the order
approvals use, recomputes the plan under those locks, moves the rows (the old reservation is
released as ``moved``, the new one written), audits one ``allocation.moved`` event per
allocation and queues the cluster's node configuration push.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q

from allocations.booking.attempts import AttemptAsk, booking_rows, placement_attempt
from allocations.booking.reservations import placement_workload
from allocations.booking.state import placement_version_bump
from allocations.booking.tenancy import DepartmentTree, Tenant, tenant_of
from allocations.booking.view import (
    GPU_MILLI,
    NodeRow,
    UnitShape,
    gpu_label,
    node_rows,
    unit_shape,
)
from allocations.catalogue.selectors import holding_with_live_units, live_reservations_on, unplaced_labels
from allocations.catalogue.states import HOLDING_STATES
from allocations.models import Allocation, AllocationState, Flavor, Reservation
from audit import actions
from audit.services import audit_record
from clusters.models import Cluster
from clusters.outbox import push_enqueue
from kernel.clock import clock_now
from placement import make_policy
from placement.mig import geometry_for_model
from tenants.access import require_platform_admin

PLAN_POLICIES = ("ours", "bestfit")


@dataclass(frozen=True)
class Fragmentation:
    """How a cluster's schedulable GPUs are used: the capacity left on partly used GPUs is
    stranded for any work that needs a whole GPU (or a larger slice than is left)."""

    gpus: int
    partly_used: int
    free_whole: int
    stranded_milli: int

    def better_than(self, other: Fragmentation) -> bool:
        return (self.stranded_milli, -self.free_whole) < (other.stranded_milli, -other.free_whole)

    def describe(self) -> str:
        stranded = format((Decimal(self.stranded_milli) / GPU_MILLI).quantize(Decimal("0.01")), "f")
        return (
            f"{self.partly_used} of {self.gpus} GPUs partly used, {stranded} GPU-equivalents stranded, "
            f"{self.free_whole} whole GPUs free"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "gpus": self.gpus, "partly_used": self.partly_used, "free_whole": self.free_whole,
            "stranded_milli": self.stranded_milli,
        }


def reservation_used_milli(row: Reservation, *, model: str, memory_mib: int) -> int:
    """The compute the reservation takes of each of its GPUs (``model`` with ``memory_mib``), in
    thousandths of a GPU: its share, or its MIG profile's compute slices out of seven."""
    if not row.mig_profile:
        return row.gpu_milli
    geometry = geometry_for_model(model, memory_mib)
    if geometry is None or row.mig_profile not in geometry.by_name:
        return GPU_MILLI
    return round(geometry.profile(row.mig_profile).compute * GPU_MILLI / 7)


def cluster_fragmentation(*, nodes: list[NodeRow], reservations: list[Reservation]) -> Fragmentation:
    """How much of each GPU the rows book, whenever they hold it (a layout's measure: units booked
    one after another on one GPU use it well, as units booked side by side do)."""
    gpus = {(row.node.pk, gpu.index): gpu for row in nodes if row.node.is_schedulable for gpu in row.gpus}
    used: dict[tuple[int, int], int] = defaultdict(int)
    for row in reservations:
        for index in row.gpu_indices:
            gpu = gpus.get((row.node_id, int(index)))
            if gpu is not None:
                used[(row.node_id, int(index))] += reservation_used_milli(row, model=gpu.model, memory_mib=gpu.memory_mib)
    partly = [min(used[key], GPU_MILLI) for key in gpus if 0 < used[key] < GPU_MILLI]
    return Fragmentation(
        gpus=len(gpus),
        partly_used=len(partly),
        free_whole=sum(1 for key in gpus if used[key] == 0),
        stranded_milli=sum(GPU_MILLI - value for value in partly),
    )


@dataclass(frozen=True)
class Move:
    reservation_id: int
    allocation_id: int
    unit: int
    flavor: str
    source: str
    target: str
    new: Reservation = field(compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {"allocation": self.allocation_id, "unit": self.unit, "flavor": self.flavor, "from": self.source,
                "to": self.target}


@dataclass
class DefragPlan:
    cluster: Cluster
    movable_units: int
    movable_allocations: int
    before: Fragmentation
    after: Fragmentation
    policy: str = ""
    moves: list[Move] = field(default_factory=list)
    unplaced: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster.name,
            "movable_units": self.movable_units,
            "movable_allocations": self.movable_allocations,
            "fragmentation_before": self.before.as_dict(),
            "fragmentation_after": self.after.as_dict(),
            "policy": self.policy,
            "moves": [move.as_dict() for move in self.moves],
            "unplaced": self.unplaced,
        }


def _where(row: Reservation) -> str:
    return f"{row.node.name} {gpu_label(row.gpu_indices, row.mig_profile, row.mig_start)}"


def _place_key(row: Reservation) -> tuple[int, tuple[int, ...], str, int | None]:
    return (row.node_id, tuple(int(i) for i in row.gpu_indices), row.mig_profile, row.mig_start)


def _unit_size(shape: UnitShape) -> int:
    if shape.mig_profile:
        geometry = geometry_for_model(shape.gpu_model)
        return round(geometry.profile(shape.mig_profile).compute * GPU_MILLI / 7) if geometry else GPU_MILLI
    return shape.gpu_milli


def _replan(
    *, cluster: Cluster, nodes: list[NodeRow], fixed: list[Reservation], movable: list[Reservation], policy_name: str
) -> list[Reservation] | None:
    """New rows (unsaved) for every movable unit, or None when they do not all fit this way."""
    # Units are re-placed per shape and project: a project's units keep to its tenancy rules.
    groups: dict[tuple[UnitShape, int], list[Reservation]] = defaultdict(list)
    flavors: dict[tuple[UnitShape, int], Flavor] = {}
    tree = DepartmentTree.load()
    tenants: dict[int, Tenant] = {}
    for row in movable:
        shape, project = unit_shape(row.allocation.flavor), row.allocation.project
        if project.pk not in tenants:
            tenants[project.pk] = tenant_of(project, tree=tree)
        groups[(shape, project.pk)].append(row)
        flavors[(shape, project.pk)] = row.allocation.flavor
    workload = placement_workload()
    planned: list[Reservation] = []
    for key in sorted(groups, key=lambda key: (-_unit_size(key[0]), key[0].gpu_model, key[0].mig_profile or "", key[1])):
        rows = sorted(groups[key], key=lambda row: (row.allocation_id, row.unit))
        ask = AttemptAsk(cluster, flavors[key], len(rows), make_policy(policy_name, workload), tenants[key[1]])
        attempt = placement_attempt(ask, nodes=nodes, reservations=fixed + planned)
        if not attempt.complete:
            return None
        fresh = booking_rows(attempt.bookings, shape=attempt.shape)
        planned.extend(_assign(rows, fresh))
    return planned


def _assign(rows: list[Reservation], fresh: list[Reservation]) -> list[Reservation]:
    """Give each new place to a unit: first to a unit of the same allocation already there."""
    by_allocation: dict[int, list[Reservation]] = defaultdict(list)
    for row in rows:
        by_allocation[row.allocation_id].append(row)
    waiting = list(rows)
    unclaimed = []
    for new in fresh:
        old = next((row for row in waiting if _place_key(row) == _place_key(new)), None)
        if old is None:
            unclaimed.append(new)
            continue
        waiting.remove(old)
        new.allocation, new.unit = old.allocation, old.unit  # with its interval (allocations.booking.usage)
    for old, new in zip(waiting, unclaimed, strict=True):
        new.allocation, new.unit = old.allocation, old.unit
    return fresh


def movable_allocation_ids(*, cluster: Cluster, now: datetime.datetime) -> list[int]:
    """Allocations on the cluster no workload can be using yet."""
    return list(
        Allocation.objects.filter(cluster=cluster, state__in=HOLDING_STATES)
        .filter(Q(state=AllocationState.APPROVED) | Q(starts_at__gt=now))
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def defrag_plan(*, cluster: Cluster, now: datetime.datetime | None = None, movable_ids: list[int] | None = None) -> DefragPlan:
    """What moving the not-yet-started units would gain; nothing is changed."""
    moment = now or clock_now()
    ids = set(movable_allocation_ids(cluster=cluster, now=moment) if movable_ids is None else movable_ids)
    nodes = node_rows(cluster)
    live = list(
        live_reservations_on(cluster=cluster)
        .select_related("allocation__flavor", "allocation__project", "node")
        .order_by("pk")
    )
    movable = [row for row in live if row.allocation_id in ids]
    fixed = [row for row in live if row.allocation_id not in ids]
    before = cluster_fragmentation(nodes=nodes, reservations=live)
    plan = DefragPlan(
        cluster=cluster, movable_units=len(movable), movable_allocations=len({row.allocation_id for row in movable}),
        before=before, after=before, unplaced=unplaced_labels(holding_with_live_units(cluster_ids=[cluster.pk]).select_related("flavor").order_by("pk")),
    )
    if not movable:
        return plan
    for policy_name in PLAN_POLICIES:
        planned = _replan(cluster=cluster, nodes=nodes, fixed=fixed, movable=movable, policy_name=policy_name)
        if planned is None:
            continue
        after = cluster_fragmentation(nodes=nodes, reservations=fixed + planned)
        if after.better_than(plan.after):
            plan.after, plan.policy, plan.moves = after, policy_name, _moves(movable, planned)
    return plan


def _moves(movable: list[Reservation], planned: list[Reservation]) -> list[Move]:
    new_by_unit = {(row.allocation_id, row.unit): row for row in planned}
    moves = []
    for old in sorted(movable, key=lambda row: (row.allocation_id, row.unit)):
        new = new_by_unit[(old.allocation_id, old.unit)]
        if _place_key(new) != _place_key(old):
            moves.append(
                Move(reservation_id=old.pk, allocation_id=old.allocation_id, unit=old.unit,
                     flavor=old.allocation.flavor.name, source=_where(old), target=_where(new), new=new)
            )
    return moves


@transaction.atomic
def defrag_apply(
    *, cluster_id: int, actor: User | None = None, now: datetime.datetime | None = None,
    planner: Callable[..., DefragPlan] | None = None,
) -> DefragPlan:
    """Compute the plan under locks and carry it out (see the module docstring). ``actor`` None is
    the operator's command line or the periodic run; a portal user must be a platform admin.
    ``planner`` (default ``defrag_plan``, same keywords) lets the periodic run keep to its move
    budget (``allocations.booking.defrag_schedule``)."""
    if actor is not None:
        require_platform_admin(actor, to="move GPU reservations")
    moment = now or clock_now()
    cluster = Cluster.objects.get(pk=cluster_id)
    candidates = movable_allocation_ids(cluster=cluster, now=moment)
    locked = list(
        Allocation.objects.select_for_update(of=("self",), no_key=True).filter(pk__in=candidates).order_by("pk").values_list("pk", flat=True)
    )
    cluster = Cluster.objects.select_for_update(no_key=True).get(pk=cluster_id)
    still_movable = set(movable_allocation_ids(cluster=cluster, now=moment)) & set(locked)
    plan = (planner or defrag_plan)(cluster=cluster, now=moment, movable_ids=sorted(still_movable))
    if not plan.moves:
        return plan
    by_allocation: dict[int, list[Move]] = defaultdict(list)
    for move in plan.moves:
        by_allocation[move.allocation_id].append(move)
    version = placement_version_bump(cluster_id=cluster.pk)
    for move in plan.moves:
        Reservation.objects.filter(pk=move.reservation_id).update(released_at=moment, release_reason="moved",
                                                                  changed_version=version)
        move.new.changed_version = version
    Reservation.objects.bulk_create([move.new for move in plan.moves])
    allocations = Allocation.objects.select_related("project").in_bulk(list(by_allocation))
    for allocation_id, moves in sorted(by_allocation.items()):
        allocation = allocations[allocation_id]
        audit_record(
            actor=actor,
            action=actions.ALLOCATION_MOVED,
            target=allocation,
            department_id=allocation.project.department_id,
            before={"placement": [move.source for move in moves]},
            after={"placement": [move.target for move in moves]},
            details={
                "cluster": cluster.name,
                "units": [move.unit for move in moves],
                "policy": plan.policy,
                "fragmentation_before": plan.before.as_dict(),
                "fragmentation_after": plan.after.as_dict(),
            },
        )
    push_enqueue(cluster_id=cluster.pk, project_id=None)
    # The moved projects' namespaces say where their pods may run (delivery.pinning): push them too.
    for project_id in sorted({allocation.project_id for allocation in allocations.values()}):
        push_enqueue(cluster_id=cluster.pk, project_id=project_id)
    return plan

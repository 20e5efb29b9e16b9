"""Booking allocations onto concrete GPUs with the placement engine, and freeing them.

``allocation_approve`` books what admission placed (``reservations_store``, the attempt from
``attempts.placement_attempt`` through the admission's capacity room) after the allocation, its
department chain and the candidate clusters are row-locked (in that order, each in primary-key
order): every writer of a cluster's reservations holds that cluster's lock, so the engine's
picture cannot change before commit. Releasing needs no cluster lock: it only ever frees capacity.
"""

from __future__ import annotations

import threading
from collections import defaultdict

from django.contrib.auth.models import User
from django.db.models import Exists, OuterRef, QuerySet, Sum

from allocations.booking.attempts import Attempt, AttemptAsk, Booking, bookings_where, placement_attempt
from allocations.booking.policy import placement_policy_for
from allocations.booking.state import ClusterState, placement_version_bump
from allocations.booking.tenancy import tenant_of
from allocations.booking.view import (
    unit_shape,
)
from allocations.catalogue.selectors import live_reservations, live_reservations_on
from allocations.catalogue.states import HOLDING_STATES
from allocations.models import Allocation, AllocationState, Flavor, Reservation
from audit import actions
from audit.services import audit_record
from clusters.models import Cluster
from kernel.clock import clock_now
from kernel.errors import CapacityExceeded
from placement import Workload, default_policy, mig_tables
from placement.workload import UnitKey


def placement_engine_warm() -> None:
    """Build the engine's MIG layout tables (about a second, once per process), so that the first
    approval of a worker does not compute them while it holds the cluster's lock."""
    default_policy()


def placement_engine_warm_at_start() -> threading.Thread:
    """Build every MIG table of the engine in a background thread as the process starts (the web
    server's and the worker's), so that neither the first request nor the first approval waits
    for them; a request that comes first builds what it needs itself (the tables are pure)."""
    def build() -> None:
        mig_tables.tables_build()
        placement_engine_warm()

    thread = threading.Thread(target=build, name="placement-tables", daemon=True)
    thread.start()
    return thread


def placement_workload(*, include: Flavor | None = None) -> Workload:
    """The unit shapes the portal is asked for: the 'typical tasks' the default policy keeps room
    for. Each active flavor counts one unit, so that what the catalogue offers (whole GPUs too)
    is expected even before anyone asks for it, plus the units of pending and holding allocations."""
    units: dict[int, float] = {pk: 1.0 for pk in Flavor.objects.filter(is_active=True).values_list("pk", flat=True)}
    for row in (
        Allocation.objects.filter(state__in=[AllocationState.PENDING, *HOLDING_STATES])
        .values("flavor")
        .annotate(units=Sum("quantity"))
    ):
        units[row["flavor"]] = units.get(row["flavor"], 0.0) + float(row["units"])
    if include is not None:
        units[include.pk] = units.get(include.pk, 0.0) + 1.0
    flavors = Flavor.objects.in_bulk(list(units))
    weights: dict[UnitKey, float] = defaultdict(float)
    for flavor_id, count in units.items():
        shape = unit_shape(flavors[flavor_id])
        weights[(shape.cpu_millicores, shape.gpu_milli, shape.gpu_model, shape.mig_profile, shape.memory_mib)] += count
    # Most popular first, ties in a fixed order: the preview and the approval see the same workload.
    return Workload.from_unit_weights(weights)


def reservations_store(*, allocation: Allocation, attempt: Attempt, first_unit: int = 0) -> list[Reservation]:
    """Store the attempt's bookings, stamped with the cluster's next placement version."""
    version = placement_version_bump(cluster_id=attempt.cluster.pk)
    rows = [
        Reservation(
            allocation=allocation,
            unit=first_unit + number,
            node=booking.node,
            gpu_indices=list(booking.gpu_indices),
            gpu_milli=booking.gpu_milli,
            mig_profile=booking.mig_profile or "",
            mig_start=booking.mig_start if booking.mig_profile else None,
            cpu_millicores=attempt.shape.cpu_millicores,
            memory_mib=attempt.shape.memory_mib,
            policy=booking.policy,
            changed_version=version,
        )
        for number, booking in enumerate(attempt.bookings)
    ]
    return Reservation.objects.bulk_create(rows)


def placement_refusal(*, flavor: Flavor, quantity: int, attempts: list[Attempt]) -> CapacityExceeded:
    """Why none of ``attempts`` placed every unit (the fullest attempt speaks)."""
    if not attempts:
        return CapacityExceeded(
            f"No active cluster has {flavor.gpu_model} GPUs.",
            details={"gpu_model": flavor.gpu_model, "requested": str(quantity)},
        )
    best = max(attempts, key=lambda attempt: len(attempt.bookings))
    fitting = f"; {len(best.bookings)} of {quantity} would fit" if best.bookings else ""
    return CapacityExceeded(
        f"No room for {quantity} × {flavor.name} on cluster {best.cluster.name}: {best.reason}{fitting}.",
        details={
            "cluster": best.cluster.name,
            "gpu_model": flavor.gpu_model,
            "requested": str(quantity),
            "placed": str(len(best.bookings)),
            "kind": best.kind,
            "reason": best.reason,
            **({"cause": best.cause} if best.cause else {}),
        },
    )


def reservations_release(*, allocation: Allocation, reason: str) -> int:
    """Free every live reservation of ``allocation`` (rows are kept, marked released)."""
    return reservations_free(rows=live_reservations_on().filter(allocation=allocation), reason=reason)


def reservations_free(*, rows: QuerySet[Reservation], reason: str) -> int:
    """Mark the live ``rows`` released, each cluster's stamped with its next placement version (the
    cluster's row is taken FOR NO KEY UPDATE until the transaction ends, after the allocation's,
    as kernel/locks.py orders them)."""
    freed = 0
    moment = clock_now()
    for cluster_id in sorted(set(rows.values_list("node__cluster_id", flat=True))):
        version = placement_version_bump(cluster_id=cluster_id)
        freed += rows.filter(node__cluster_id=cluster_id).update(
            released_at=moment, release_reason=reason, changed_version=version
        )
    return freed


def reservations_adopt(
    *, cluster: Cluster, workload: Workload, actor: User | None, skip: int | None = None, state: ClusterState | None = None
) -> int:
    """Book the units of allocations granted on ``cluster`` before placement existed, so the
    engine never counts their GPUs as free. Rows another transaction holds are left for later
    (``skip_locked``); an allocation that no longer fits stays unplaced and is reported by
    ``placement_defrag``. Returns how many allocations were adopted. ``state``: the cluster's kept
    state, which spares the search when every grant of the cluster holds a row it knows."""
    holding = Allocation.objects.filter(cluster_id=cluster.pk, state__in=HOLDING_STATES).exclude(pk=skip or 0)
    if state is not None and holding.count() == len(state.allocations() - {skip or 0}):
        return 0  # every grant of the cluster holds a live reservation (the state knows them): none to adopt
    legacy = holding.exclude(Exists(live_reservations_on().filter(allocation=OuterRef("pk")))).values_list("pk", flat=True)
    adopted = 0
    for allocation_id in list(legacy.order_by("pk")):
        allocation = (
            Allocation.objects.select_for_update(of=("self",), skip_locked=True, no_key=True)
            .select_related("flavor", "project")
            .filter(pk=allocation_id, state__in=HOLDING_STATES)
            .first()
        )
        if allocation is None:
            continue
        policy = placement_policy_for(allocation.flavor, workload)
        ask = AttemptAsk(cluster, allocation.flavor, allocation.quantity, policy, tenant_of(allocation.project))
        attempt = placement_attempt(ask)
        if not attempt.complete:
            continue
        reservations_store(allocation=allocation, attempt=attempt)
        audit_record(
            actor=actor,
            action=actions.ALLOCATION_PLACED,
            target=allocation,
            department_id=allocation.project.department_id,
            details={"cluster": cluster.name, "placement": attempt.where(), "why": "granted before GPU placement"},
        )
        adopted += 1
    return adopted


def reservations_where(*, allocation: Allocation) -> dict[str, list[str]]:
    """Node name → the GPUs the allocation's live reservations hold (``gpu3``, ``gpu2@4`` for MIG)."""
    rows = live_reservations(allocation)
    return bookings_where(
        [Booking(row.node, tuple(row.gpu_indices), row.gpu_milli, row.mig_profile or None, row.mig_start, row.policy)
         for row in rows]
    )

"""Booking allocations onto concrete GPUs with the placement engine, and freeing them.

``allocation_approve`` books what admission placed (``reservations_store``, the attempt from
``placement_attempt`` through the admission's capacity room) after the allocation, its department
chain and the candidate clusters are row-locked (in that order, each in primary-key order):
every writer of a cluster's reservations holds that cluster's lock, so the engine's picture
cannot change before commit. Releasing needs no cluster lock: it only ever frees capacity.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User
from django.db.models import Exists, OuterRef, QuerySet, Sum

from allocations.booking.kept_views import kept_exclusion, kept_view
from allocations.booking.minimums import minimums_refusal
from allocations.booking.policy import placement_policy_for
from allocations.booking.sharing import (
    exclusion_for,
    model_memory_mib,
    reserve_refusal,
    shape_under_reserve,
    too_big,
)
from allocations.booking.state import ClusterState, placement_version_bump
from allocations.booking.tenancy import Exclusion, Tenant, tenant_of
from allocations.booking.usage import with_spans
from allocations.booking.view import (
    PINNED_POLICY,
    NodeRow,
    PlacementView,
    UnitShape,
    gpu_label,
    node_rows,
    placement_view,
    unit_shape,
    view_node_rebuild,
)
from allocations.catalogue.selectors import live_reservations, live_reservations_on
from allocations.catalogue.states import HOLDING_STATES
from allocations.models import Allocation, AllocationState, Flavor, Reservation
from audit import actions
from audit.services import audit_record
from clusters.models import Cluster, Node
from kernel.clock import clock_now
from kernel.errors import CapacityExceeded
from placement import Placement, Policy, Rejection, TaskClass, Workload, default_policy, mig_tables
from placement.placing import place


@dataclass(frozen=True)
class Booking:
    """Where one unit goes (not yet stored)."""

    node: Node
    gpu_indices: tuple[int, ...]
    gpu_milli: int
    mig_profile: str | None
    mig_start: int | None
    policy: str

    def label(self) -> str:
        return gpu_label(self.gpu_indices, self.mig_profile, self.mig_start)


@dataclass
class Attempt:
    """The outcome of placing every unit of a request on one cluster (nothing stored)."""

    cluster: Cluster
    shape: UnitShape
    quantity: int
    bookings: list[Booking] = field(default_factory=list)
    reason: str = ""
    kind: str = ""

    @property
    def complete(self) -> bool:
        return len(self.bookings) == self.quantity

    def first(self, units: int) -> Attempt:
        """The attempt of the first ``units`` units: placing one after another, a longer attempt
        begins exactly as a shorter one would."""
        return Attempt(cluster=self.cluster, shape=self.shape, quantity=units, bookings=self.bookings[:units],
                       reason="" if len(self.bookings) >= units else self.reason,
                       kind="" if len(self.bookings) >= units else self.kind)

    def where(self, units: int | None = None) -> dict[str, list[str]]:
        """Node name → booked GPUs (with the MIG start) of the first ``units`` bookings (all by
        default), for audit details, the API and the preview."""
        return bookings_where(self.bookings[:units])


def bookings_where(bookings: list[Booking]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for booking in bookings:
        out[booking.node.name].append(booking.label())
    return dict(sorted(out.items()))


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
    weights: dict[tuple[Any, ...], float] = defaultdict(float)
    for flavor_id, count in units.items():
        shape = unit_shape(flavors[flavor_id])
        weights[(shape.cpu_millicores, shape.gpu_milli, shape.gpu_model, shape.mig_profile, shape.memory_mib)] += count
    total = sum(weights.values()) or 1.0
    # Most popular first, ties in a fixed order: the preview and the approval see the same workload.
    classes = tuple(
        TaskClass(cpu, milli, 1, frozenset({model}), profile, weight / total, memory)
        for (cpu, milli, model, profile, memory), weight in sorted(weights.items(), key=lambda item: (-item[1], repr(item[0])))
    )
    return Workload(classes)


def _no_offer_reason(view: PlacementView, nodes: list[NodeRow]) -> str:
    shape, cluster = view.shape, view.cluster
    if below := minimums_refusal(view=view, nodes=nodes):
        return below
    if shape.needs_hami and not cluster.use_hami:
        return f"cluster {cluster.name} does not run HAMi, so it offers no vGPU shares"
    if view.left_out:
        return f"every node of cluster {cluster.name} that offers {shape.describe()} is kept apart: {_left_out(view)}"
    if shape.needs_volcano and not cluster.use_volcano:
        return f"cluster {cluster.name} does not run Volcano, so it offers no Volcano vGPU shares"
    return f"no schedulable node of cluster {cluster.name} offers {shape.describe()}"


def _left_out(view: PlacementView, most: int = 5) -> str:
    named = sorted(view.left_out.items())
    text = "; ".join(f"{name}: {why}" for name, why in named[:most])
    return text + (f"; and {len(named) - most} more" if len(named) > most else "")


def placement_attempt(
    *,
    cluster: Cluster,
    flavor: Flavor,
    quantity: int,
    policy: Policy,
    nodes: list[NodeRow] | None = None,
    reservations: list[Reservation] | None = None,
    tenant: Tenant | None = None,
    exclusion: Exclusion | None = None,
    state: ClusterState | None = None,
) -> Attempt:
    """Place ``quantity`` units one by one on a scratch copy of the cluster (its live reservations,
    or ``reservations``): free pinned MIG instances first (they exist already), then wherever the
    policy chooses. A MIG unit goes to a GPU that is carved already when one can take it, and
    carves a fresh GPU only when none can: an uncarved GPU stays available whole (measured in
    docs/placement.md §8: more granted and 4 points more allocation than letting the policy
    choose among empty GPUs too).

    A unit of a shared mode is booked for the share of the GPU its memory needs under the memory
    reserve, and the nodes and GPUs ``tenant`` may not share (another department's MPS node, a
    dedicated pool) are left out (``allocations.booking.sharing``; None: an unnamed project).

    With ``state`` (the cluster's kept state, ``allocations.booking.state``; ``nodes`` then are its
    own), the nodes and reservations come from it and the pictures are its kept ones, rebuilt only
    where ``reservations`` differ from the live ones: the same attempt, without reading the cluster."""
    if state is not None:
        nodes = state.nodes_of(flavor.gpu_model) if nodes is None else nodes
        if reservations is None:
            reservations = state.rows_of_model(flavor.gpu_model)
        key = ("memory", flavor.gpu_model)
        if key not in state.inventory_memo:
            state.inventory_memo[key] = model_memory_mib(nodes, flavor.gpu_model)
        gpu_memory = int(state.inventory_memo[key])
    else:
        nodes = node_rows(cluster, gpu_model=flavor.gpu_model) if nodes is None else nodes
        gpu_memory = model_memory_mib(nodes, flavor.gpu_model)
    shape = shape_under_reserve(shape=unit_shape(flavor), flavor=flavor, cluster=cluster, gpu_memory_mib=gpu_memory)
    attempt = Attempt(cluster=cluster, shape=shape, quantity=quantity)
    if too_big(shape):
        attempt.reason = reserve_refusal(flavor=flavor, cluster=cluster, gpu_memory_mib=gpu_memory)
        attempt.kind = "memory-reserve"
        return attempt
    if reservations is None:
        reservations = list(with_spans(live_reservations_on(node_ids=[row.node.pk for row in nodes])).order_by("pk"))
    if exclusion is None and state is not None:
        exclusion = kept_exclusion(state, tenant=tenant, nodes=nodes, reservations=reservations)
    if exclusion is None:
        exclusion = exclusion_for(tenant=tenant, nodes=nodes, reservations=reservations)

    def picture(rows: list[Reservation], *, extra: list[Reservation] | None = None,
                open_empty_gpus: bool | None = None) -> PlacementView:
        if state is not None:
            return kept_view(state, cluster=cluster, shape=shape, reservations=rows, open_empty_gpus=open_empty_gpus,
                             exclusion=exclusion, extra=extra)
        return placement_view(cluster=cluster, shape=shape, nodes=nodes, reservations=rows + (extra or []),
                              open_empty_gpus=open_empty_gpus, exclusion=exclusion)

    view = picture(reservations)
    if not view.offered:
        if view.pinned_room:
            attempt.reason = f"the MIG instances pinned on cluster {cluster.name} hold no free {shape.mig_profile}"
            attempt.kind = "mig-slice"
        else:
            attempt.reason, attempt.kind = _no_offer_reason(view, nodes), "not-offered"
        return attempt

    def carved_first() -> PlacementView | None:
        if shape.mig_profile is None or view.engine is None:
            return None
        return picture(reservations, extra=booking_rows(attempt.bookings, shape=shape), open_empty_gpus=False)

    carved = carved_first()
    carved_rows: tuple[dict[str, NodeRow], dict[int, list[Reservation]]] | None = None
    room = {name: list(free) for name, free in view.pinned_room.items()}
    pinned = list(view.pinned_free)
    for unit in range(quantity):
        claim = next(
            (item for item in pinned
             if room[item[0].name][0] >= shape.cpu_millicores and room[item[0].name][1] >= shape.memory_mib),
            None,
        )
        if claim is not None:
            pinned.remove(claim)
            node, index, start = claim
            room[node.name][0] -= shape.cpu_millicores
            room[node.name][1] -= shape.memory_mib
            attempt.bookings.append(Booking(node, (index,), 0, shape.mig_profile, start, PINNED_POLICY))
            continue
        if view.engine is None:
            attempt.reason = f"the MIG instances pinned on cluster {cluster.name} hold no free {shape.mig_profile}"
            attempt.kind = "mig-slice"
            return attempt
        request = shape.request(name=f"unit {unit}")
        if carved is not None and carved.engine is not None:
            on_carved = place(carved.engine, request, policy, explain=False)
            if isinstance(on_carved, Placement):
                carved.engine.apply(on_carved)
                view.engine.apply(on_carved)
                attempt.bookings.append(_booking(view, on_carved, shape))
                continue
        decision = place(view.engine, request, policy)
        if isinstance(decision, Rejection):
            attempt.reason, attempt.kind = decision.reason, decision.kind.value
            if view.left_out:
                attempt.reason += f" (left out for tenancy: {_left_out(view)})"
            return attempt
        view.engine.apply(decision)
        attempt.bookings.append(_booking(view, decision, shape))
        if carved is not None:  # a fresh GPU was carved: the carved-first picture shows it carved now
            if carved_rows is None:
                carved_rows = _rows_by_node(nodes, reservations)
            row, held = carved_rows[0][decision.node], carved_rows[1].get(carved_rows[0][decision.node].pk, [])
            booked = [booking for booking in attempt.bookings if booking.node.name == decision.node]
            if not view_node_rebuild(carved, row=row, reservations=[*held, *booking_rows(booked, shape=shape)],
                                     carve_empty=False, exclusion=exclusion):
                carved = carved_first()
    return attempt


def _rows_by_node(nodes: list[NodeRow], reservations: list[Reservation]) -> tuple[dict[str, NodeRow], dict[int, list[Reservation]]]:
    """The nodes by name, and the reservations by node."""
    held: dict[int, list[Reservation]] = defaultdict(list)
    for row in reservations:
        held[row.node_id].append(row)
    return {row.node.name: row for row in nodes}, held


def booking_rows(bookings: list[Booking], *, shape: UnitShape) -> list[Reservation]:
    """Bookings as unsaved reservation rows (to build a picture that includes them)."""
    return [
        Reservation(
            node=booking.node, gpu_indices=list(booking.gpu_indices), gpu_milli=booking.gpu_milli,
            mig_profile=booking.mig_profile or "", mig_start=booking.mig_start if booking.mig_profile else None,
            cpu_millicores=shape.cpu_millicores, memory_mib=shape.memory_mib, policy=booking.policy,
        )
        for booking in bookings
    ]


def _booking(view: PlacementView, decision: Placement, shape: UnitShape) -> Booking:
    return Booking(
        node=view.nodes[decision.node],
        gpu_indices=decision.gpu_indices,
        gpu_milli=shape.gpu_milli,
        mig_profile=shape.mig_profile,
        mig_start=decision.mig_start,
        policy=decision.policy,
    )


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
        attempt = placement_attempt(
            cluster=cluster, flavor=allocation.flavor, quantity=allocation.quantity,
            policy=placement_policy_for(allocation.flavor, workload), tenant=tenant_of(allocation.project),
        )
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

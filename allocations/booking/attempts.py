"""Placing the units of a request on one cluster (nothing stored): ``placement_attempt``.

An attempt has one picture source (``AttemptPictures``: what the cluster looks like for it, from
the cluster's kept state or read live) and one step per strategy, tried in this order for each
unit: a free pinned MIG instance (``_place_pinned``), a GPU already carved (``_place_on_carved``),
then wherever the policy chooses (``_place_by_policy``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from allocations.booking.kept_views import PictureTerms, kept_exclusion, kept_view
from allocations.booking.minimums import minimums_refusal
from allocations.booking.sharing import (
    exclusion_for,
    model_memory_mib,
    reserve_refusal,
    shape_under_reserve,
    too_big,
)
from allocations.booking.state import ClusterState
from allocations.booking.tenancy import Exclusion, Tenant
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
from allocations.catalogue.selectors import live_reservations_on
from allocations.models import Flavor, Reservation
from clusters.models import Cluster, Node
from placement import Placement, Policy, Rejection, Request
from placement.placing import free_units, place

CAUSE_DRIVER_MINIMUM = "driver-minimum"
"""Every node that would offer the unit reports a driver or CUDA older than the flavor's minimum."""
CAUSE_TENANCY = "tenancy"
"""Every node that would offer the unit is kept apart from the tenant (a dedicated pool, another's MPS node)."""
CAUSE_TENANCY_SOME = "tenancy-some"
"""Some nodes were kept apart from the tenant and the others have no room left."""
CAUSES = (CAUSE_DRIVER_MINIMUM, CAUSE_TENANCY, CAUSE_TENANCY_SOME)


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
    cause: str = ""
    """What in the portal's rules kept the next unit out, when one did (``CAUSES``); empty: plain room."""
    counted: int | None = None
    """Units past the bookings that would still find a place, counted without placing them
    (``AttemptAsk.count_to``); None: not counted (the bookings go on as far as the count asked)."""

    @property
    def complete(self) -> bool:
        return len(self.bookings) == self.quantity

    @property
    def free(self) -> int:
        """Units that would find a place now, one after another: the bookings and those counted."""
        return len(self.bookings) + (self.counted or 0)

    def knows(self, units: int) -> bool:
        """Whether ``first(units)`` is this attempt's placement of that many units: they were
        placed one by one, or the attempt ran out of room before them (a longer request fails as
        it did). An attempt that stopped at its quantity says nothing of a longer one."""
        return units <= len(self.bookings) or not self.complete

    def first(self, units: int) -> Attempt:
        """The attempt of the first ``units`` units: placing one after another, a longer attempt
        begins exactly as a shorter one would."""
        return Attempt(cluster=self.cluster, shape=self.shape, quantity=units, bookings=self.bookings[:units],
                       reason="" if len(self.bookings) >= units else self.reason,
                       kind="" if len(self.bookings) >= units else self.kind,
                       cause="" if len(self.bookings) >= units else self.cause)

    def where(self, units: int | None = None) -> dict[str, list[str]]:
        """Node name → booked GPUs (with the MIG start) of the first ``units`` bookings (all by
        default), for audit details, the API and the preview."""
        return bookings_where(self.bookings[:units])


def bookings_where(bookings: list[Booking]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for booking in bookings:
        out[booking.node.name].append(booking.label())
    return dict(sorted(out.items()))


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


@dataclass(frozen=True)
class AttemptAsk:
    """What an attempt places: ``quantity`` units of ``flavor`` on ``cluster`` where ``policy``
    chooses, for ``tenant`` (None: an unnamed project). ``count_to``: once every unit is placed,
    how many units in all would find a place, up to this many (``Attempt.counted``: counted by the
    engine's arithmetic where it is exact, else by placing more units one by one)."""

    cluster: Cluster
    flavor: Flavor
    quantity: int
    policy: Policy
    tenant: Tenant | None = None
    count_to: int = 0


@dataclass(frozen=True)
class AttemptPictures:
    """What the cluster looks like for one attempt: its nodes of the flavor's model, the
    reservations the attempt places next to, what the tenant may not share, and pictures built
    from them: the kept state's (``state``: rebuilt only where the reservations differ from the
    live ones) or fresh ones."""

    cluster: Cluster
    shape: UnitShape
    nodes: list[NodeRow]
    reservations: list[Reservation]
    exclusion: Exclusion
    state: ClusterState | None

    def view(self, *, extra: list[Reservation] | None = None, open_empty_gpus: bool | None = None) -> PlacementView:
        """The picture of the reservations and then ``extra`` (units not stored yet)."""
        if self.state is not None:
            terms = PictureTerms(self.shape, open_empty_gpus, self.exclusion)
            return kept_view(self.state, cluster=self.cluster, terms=terms, reservations=self.reservations, extra=extra)
        return placement_view(cluster=self.cluster, shape=self.shape, nodes=self.nodes,
                              reservations=self.reservations + (extra or []), open_empty_gpus=open_empty_gpus,
                              exclusion=self.exclusion)  # fmt: skip

    def carved_first(self, bookings: list[Booking]) -> PlacementView:
        """The picture with ``bookings`` placed in which no empty GPU is carved: where a MIG unit
        goes first (a GPU already carved), so that an uncarved GPU stays available whole."""
        return self.view(extra=booking_rows(bookings, shape=self.shape), open_empty_gpus=False)


def placement_attempt(
    ask: AttemptAsk,
    *,
    nodes: list[NodeRow] | None = None,
    reservations: list[Reservation] | None = None,
    exclusion: Exclusion | None = None,
    state: ClusterState | None = None,
) -> Attempt:
    """Place ``ask.quantity`` units one by one on a scratch copy of the cluster (its live
    reservations, or ``reservations``): free pinned MIG instances first (they exist already), then
    wherever the policy chooses. A MIG unit goes to a GPU that is carved already when one can take
    it, and carves a fresh GPU only when none can: an uncarved GPU stays available whole (measured
    in docs/placement.md §8: more granted and 4 points more allocation than letting the policy
    choose among empty GPUs too).

    A unit of a shared mode is booked for the share of the GPU its memory needs under the memory
    reserve, and the nodes and GPUs the tenant may not share (another department's MPS node, a
    dedicated pool) are left out (``allocations.booking.sharing``).

    With ``state`` (the cluster's kept state, ``allocations.booking.state``; ``nodes`` then are its
    own), the nodes and reservations come from it and the pictures are its kept ones, rebuilt only
    where ``reservations`` differ from the live ones: the same attempt, without reading the cluster."""
    cluster, flavor = ask.cluster, ask.flavor
    nodes, gpu_memory = _nodes_and_memory(ask, nodes, state)
    shape = shape_under_reserve(shape=unit_shape(flavor), flavor=flavor, cluster=cluster, gpu_memory_mib=gpu_memory)
    attempt = Attempt(cluster=cluster, shape=shape, quantity=ask.quantity)
    if too_big(shape):
        attempt.reason = reserve_refusal(flavor=flavor, cluster=cluster, gpu_memory_mib=gpu_memory)
        attempt.kind = "memory-reserve"
        return attempt
    pictures = attempt_pictures(ask, shape, nodes=nodes, reservations=reservations, exclusion=exclusion, state=state)
    view = pictures.view()
    if not view.offered:
        attempt.reason, attempt.kind = _not_offered(view, nodes)
        attempt.cause = _not_offered_cause(view, nodes)
        return attempt
    placing = _Placing(attempt=attempt, policy=ask.policy, pictures=pictures, view=view)
    placing.run()
    if ask.count_to > ask.quantity and attempt.complete:
        placing.count(ask.count_to)
    return attempt


def _nodes_and_memory(
    ask: AttemptAsk, nodes: list[NodeRow] | None, state: ClusterState | None
) -> tuple[list[NodeRow], int]:
    """The cluster's nodes of the flavor's model (given, the state's, or read) and the memory of
    one of its GPUs (MiB; the state keeps it)."""
    model = ask.flavor.gpu_model
    if state is None:
        nodes = node_rows(ask.cluster, gpu_model=model) if nodes is None else nodes
        return nodes, model_memory_mib(nodes, model)
    nodes = state.nodes_of(model) if nodes is None else nodes
    key = ("memory", model)
    if key not in state.inventory_memo:
        state.inventory_memo[key] = model_memory_mib(nodes, model)
    return nodes, int(state.inventory_memo[key])


def attempt_pictures(
    ask: AttemptAsk,
    shape: UnitShape,
    *,
    nodes: list[NodeRow],
    reservations: list[Reservation] | None,
    exclusion: Exclusion | None,
    state: ClusterState | None,
) -> AttemptPictures:
    """The picture source of an attempt: the reservations given, the state's, or the live ones
    read with their intervals; the exclusion given, found from the state's facts, or computed."""
    if reservations is None and state is not None:
        reservations = state.rows_of_model(ask.flavor.gpu_model)
    if reservations is None:
        reservations = list(with_spans(live_reservations_on(node_ids=[row.node.pk for row in nodes])).order_by("pk"))
    if exclusion is None and state is not None:
        exclusion = kept_exclusion(state, tenant=ask.tenant, nodes=nodes, reservations=reservations)
    if exclusion is None:
        exclusion = exclusion_for(tenant=ask.tenant, nodes=nodes, reservations=reservations)
    return AttemptPictures(cluster=ask.cluster, shape=shape, nodes=nodes, reservations=reservations,
                           exclusion=exclusion, state=state)  # fmt: skip


@dataclass
class _Placing:
    """One attempt's units placed one after another, each by the first strategy that takes it."""

    attempt: Attempt
    policy: Policy
    pictures: AttemptPictures
    view: PlacementView  # the picture the policy places on, every booking applied
    carved: PlacementView | None = None  # the carved-first picture (MIG units only)
    pinned: list[tuple[Node, int, int]] = field(default_factory=list)  # free pinned MIG instances
    room: dict[str, list[int]] = field(default_factory=dict)  # node name → free CPU, memory for them
    _by_node: tuple[dict[str, NodeRow], dict[int, list[Reservation]]] | None = None

    def __post_init__(self) -> None:
        self.room = {name: list(free) for name, free in self.view.pinned_room.items()}
        self.pinned = list(self.view.pinned_free)
        if self.pictures.shape.mig_profile is not None and self.view.engine is not None:
            self.carved = self.pictures.carved_first(self.attempt.bookings)

    def run(self) -> None:
        """Stops at the first unit no strategy places, with the attempt's reason and kind."""
        attempt, shape = self.attempt, self.pictures.shape
        for unit in range(len(attempt.bookings), attempt.quantity):
            if self._place_pinned():
                continue
            if self.view.engine is None:
                attempt.reason = f"the MIG instances pinned on cluster {attempt.cluster.name} hold no free {shape.mig_profile}"
                attempt.kind = "mig-slice"
                return
            request = shape.request(name=f"unit {unit}")
            if not self._place_on_carved(request) and not self._place_by_policy(request):
                return

    def count(self, limit: int) -> None:
        """After every unit is placed: how many units in all would find a place, up to ``limit``,
        counted without placing them where the engine counts the shape exactly
        (``placement.placing.free_units``), else by placing them one by one. Placing goes on in a
        fixed order whose count is the sum of two: the free pinned instances first, each taken
        by the first unit that finds CPU and memory on its node (``_pinned_units``); then the
        policy's picture, where a unit that goes to a GPU already carved (the carved-first
        picture) is booked on the policy's picture too, at a start legal there, so the engine's
        count of that picture is the rest, whichever picture each unit went through."""
        attempt, engine = self.attempt, self.view.engine
        left = limit - attempt.quantity
        counted = 0 if engine is None else free_units(engine, self.pictures.shape.request(), left)
        if counted is None:
            attempt.quantity = limit
            self.run()
            return
        attempt.counted = min(left, self._pinned_units() + counted)

    def _pinned_units(self) -> int:
        """Units the free pinned instances would still take: on each pinned node, as many as it
        has free instances and CPU and memory left for (a claim takes from its node only)."""
        shape = self.pictures.shape
        instances = Counter(node.name for node, _index, _start in self.pinned)
        total = 0
        for name, count in instances.items():
            for left, need in zip(self.room[name], (shape.cpu_millicores, shape.memory_mib), strict=True):
                count = min(count, max(left, 0) // need) if need > 0 else (count if left >= 0 else 0)
            total += count
        return total

    def _place_pinned(self) -> bool:
        """A free pinned MIG instance on a node with the CPU and memory left for the unit."""
        shape, room = self.pictures.shape, self.room
        claim = next(
            (item for item in self.pinned
             if room[item[0].name][0] >= shape.cpu_millicores and room[item[0].name][1] >= shape.memory_mib),
            None,
        )  # fmt: skip
        if claim is None:
            return False
        self.pinned.remove(claim)
        node, index, start = claim
        room[node.name][0] -= shape.cpu_millicores
        room[node.name][1] -= shape.memory_mib
        self.attempt.bookings.append(Booking(node, (index,), 0, shape.mig_profile, start, PINNED_POLICY))
        return True

    def _place_on_carved(self, request: Request) -> bool:
        """A GPU already carved, where the carved-first picture has room (MIG units only)."""
        carved, engine = self.carved, self.view.engine
        if carved is None or carved.engine is None or engine is None:
            return False
        decision = place(carved.engine, request, self.policy, explain=False)
        if not isinstance(decision, Placement):
            return False
        carved.engine.apply(decision)
        engine.apply(decision)
        self.attempt.bookings.append(_booking(self.view, decision, self.pictures.shape))
        return True

    def _place_by_policy(self, request: Request) -> bool:
        """Wherever the policy chooses; a MIG unit placed so carved a fresh GPU, which the
        carved-first picture shows carved from now on."""
        engine, attempt = self.view.engine, self.attempt
        assert engine is not None
        decision = place(engine, request, self.policy)
        if isinstance(decision, Rejection):
            attempt.reason, attempt.kind = decision.reason, decision.kind.value
            if self.view.left_out:
                attempt.reason += f" (left out for tenancy: {_left_out(self.view)})"
                attempt.cause = CAUSE_TENANCY_SOME
            return False
        engine.apply(decision)
        attempt.bookings.append(_booking(self.view, decision, self.pictures.shape))
        if self.carved is not None:
            self._carved_refresh(decision.node)
        return True

    def _carved_refresh(self, node_name: str) -> None:
        """Rebuild the node a fresh GPU was carved on in the carved-first picture (the whole
        picture when it cannot be rebuilt in place)."""
        assert self.carved is not None
        pictures = self.pictures
        if self._by_node is None:
            self._by_node = _rows_by_node(pictures.nodes, pictures.reservations)
        row = self._by_node[0][node_name]
        held = self._by_node[1].get(row.pk, [])
        booked = [booking for booking in self.attempt.bookings if booking.node.name == node_name]
        rows = [*held, *booking_rows(booked, shape=pictures.shape)]
        if not view_node_rebuild(self.carved, row=row, reservations=rows, carve_empty=False,
                                 exclusion=pictures.exclusion):  # fmt: skip
            self.carved = pictures.carved_first(self.attempt.bookings)


def _not_offered(view: PlacementView, nodes: list[NodeRow]) -> tuple[str, str]:
    """Why the cluster offers the shape nowhere, and the kind of refusal."""
    if view.pinned_room:
        return f"the MIG instances pinned on cluster {view.cluster.name} hold no free {view.shape.mig_profile}", "mig-slice"
    return _no_offer_reason(view, nodes), "not-offered"


def _not_offered_cause(view: PlacementView, nodes: list[NodeRow]) -> str:
    """The rule behind ``_no_offer_reason``'s sentence, as a code (the same tests in the same order)."""
    if view.pinned_room:
        return ""
    if minimums_refusal(view=view, nodes=nodes):
        return CAUSE_DRIVER_MINIMUM
    if view.shape.needs_hami and not view.cluster.use_hami:
        return ""
    return CAUSE_TENANCY if view.left_out else ""


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


def _rows_by_node(nodes: list[NodeRow], reservations: list[Reservation]) -> tuple[dict[str, NodeRow], dict[int, list[Reservation]]]:
    """The nodes by name, and the reservations by node."""
    held: dict[int, list[Reservation]] = defaultdict(list)
    for row in reservations:
        held[row.node_id].append(row)
    return {row.node.name: row for row in nodes}, held


def _booking(view: PlacementView, decision: Placement, shape: UnitShape) -> Booking:
    return Booking(
        node=view.nodes[decision.node],
        gpu_indices=decision.gpu_indices,
        gpu_milli=shape.gpu_milli,
        mig_profile=shape.mig_profile,
        mig_start=decision.mig_start,
        policy=decision.policy,
    )

"""Booking ahead: the GPUs as a decision over a later period sees them (docs/twin.md, "Booking ahead").

The replay's pools are one picture of now. A request that asked a later start is decided at its
submission over ``[starts_at, starts_at + requested_s)``, as the portal approves it ahead of time,
and a grant so booked (*scheduled*) holds its units from its start only. A decision whose period
meets a scheduled booking, or that lies ahead, is therefore taken on a picture of its own, built
as the portal builds it for an approval (``allocations.admission.room``, ``booking.usage``): the
units of every grant whose period meets the decision's, each GPU holding the most held at one
instant over those grants' whole periods (``placement.peaks.peak_sum``) and, on a MIG GPU, its
instances each over its period (``MigGeometry.held``), the GPU then shown as ``placement.held``
shows it. A grant running now whose period ends before the decision's starts is not there; a
reclaimed grant running out its notice is, over its whole period, until it leaves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from placement import GEOMETRIES, Cluster, Gpu, MigSlice, Node, Placement, Request
from placement.held import held_gpu
from placement.peaks import Span, peak_sum
from placement.policies import Policy as PlacementPolicy
from twin.replay.state import Pools

Cut = frozenset[tuple[int, int]]
"""The victim choice's cut: (grant id, units) taken from each grant."""


@dataclass(frozen=True)
class Booked:
    """One unit a grant books, and the period its grant holds it over; ``now``: it is on the pools
    of now as the picture holds it (a unit of a grant holding now: not leaving, not approved ahead)."""

    unit: Placement
    span: Span
    now: bool = False


def meets(span: Span, interval: Span) -> bool:
    """Whether a grant over ``span`` holds at some instant of ``interval`` (the portal's rows of
    the allocations not starting at or after its end nor ending at or before its start)."""
    return span[0] < interval[1] and span[1] > interval[0]


def picture_nodes(nodes: Sequence[Node], booked: Iterable[Booked], interval: Span) -> list[Node]:
    """``nodes`` (as the cluster file gives them: a MIG-capable GPU names its geometry) with what
    the bookings whose periods meet ``interval`` hold on each GPU (see the module's docstring)."""
    shares: dict[tuple[str, int], list[tuple[Span, int]]] = {}
    slices: dict[tuple[str, int], list[MigSlice]] = {}
    for item in booked:
        if not meets(item.span, interval):
            continue
        unit = item.unit
        for position, gpu in enumerate(unit.gpu_indices):
            key = (unit.node, gpu)
            if unit.request.mig_profile is not None:
                slices.setdefault(key, []).append(MigSlice(unit.request.mig_profile, unit.mig_starts[position], item.span))
            else:
                shares.setdefault(key, []).append((item.span, unit.request.gpu_milli))
    pictured = []
    for node in nodes:
        gpus = tuple(held_gpu(Gpu(gpu.index, gpu.model, gpu.memory_mib),
                              geometry=GEOMETRIES[gpu.mig_geometry] if gpu.mig_geometry else None,
                              milli=peak_sum(shares.get((node.name, gpu.index), [])),
                              slices=slices.get((node.name, gpu.index), ()))
                     for gpu in node.gpus)
        pictured.append(Node(node.name, node.cpu_milli, node.memory_mib, gpus, labels=node.labels))
    return pictured


class Picture:
    """The pictures of one decision's period: the pools of now copied, the nodes where they differ
    from the picture rebuilt from the bookings (``picture_nodes``): those holding a unit that is
    not on the pools of now as the picture holds it (``Booked.now``) or whose grant's period does
    not meet the decision's. Every other node holds only grants holding now, whose periods meet the
    decision's (it cannot lie before now): their units are held at one instant, so the pools of now
    show them as the picture does. Each picture asked is a copy (placing on it changes it), with,
    for a cut of the victim choice, the cut's nodes rebuilt without its units."""

    def __init__(self, nodes: Sequence[Node], now: Pools, booked: Sequence[Booked], interval: Span,
                 policy: PlacementPolicy) -> None:
        self.nodes, self.interval, self.policy = nodes, interval, policy
        self.by_name = {node.name: node for node in nodes}
        self.modes = now.modes[0]
        names = {item.unit.node for item in booked if not item.now or not meets(item.span, interval)}
        self.base = self._rebuilt(now.clusters[0], booked, names)

    def _rebuilt(self, cluster: Cluster, booked: Sequence[Booked], names: set[str]) -> Cluster:
        on: dict[str, list[Booked]] = {}
        for item in booked:
            if item.unit.node in names:
                on.setdefault(item.unit.node, []).append(item)
        copy = cluster.copy()
        for name in names:
            if not copy.node_replace(copy.index[name], picture_nodes([self.by_name[name]], on.get(name, ()),
                                                                     self.interval)[0]):
                return Cluster(picture_nodes(self.nodes, booked, self.interval))  # not expected: the same nodes
        return copy

    def pools(self, booked: Sequence[Booked] = (), rebuilt: Iterable[str] = ()) -> Pools:
        """A copy of the picture, the nodes ``rebuilt`` from ``booked`` (every unit booked less a
        cut's)."""
        cluster = self._rebuilt(self.base, booked, set(rebuilt))
        return Pools([cluster], [self.policy], [self.modes.alike(cluster)])


class PictureCut:
    """The victim choice's capacity callback on a picture: each cut asked gets the picture made
    again without the units it takes (a picture's GPUs hold peaks over periods, from which no
    unit can be taken back one by one)."""

    def __init__(self, build: Callable[[Cut], Pools]) -> None:
        self.build = build

    def fits(self, request: Request, quantity: int, cut: Cut) -> bool:
        pools = self.build(cut)
        if quantity == 1:
            return pools.fits(0, request)
        return pools.place_all(0, request, quantity) is not None

    def restore(self) -> None:
        """Nothing to put back: each picture is made for one question."""

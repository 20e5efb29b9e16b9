"""The GPUs and the grants on them, as one replay sees them.

A *pool* is one placement-engine cluster with its own placement policy instance (the one every
unit booked on it is placed by, as the portal's booking does). A grant (``Holding``) books its
units one by one, each a unit of its request's shape; a reclaim takes its last units first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from placement import Cluster, Node, Placement, Request, Workload, default_policy, place
from placement.decisions import RequestKind
from placement.policies import Policy as PlacementPolicy
from twin.replay.mig_modes import MigModes, nodes_at_rest
from twin.workload import GPU_MILLI, Job, Shape


@dataclass
class Holding:
    """A grant: a request's units on GPUs from ``start`` until its run ends or it is reclaimed."""

    gid: int
    job: Job
    department: int
    priority: int
    per_unit: Decimal  # GPU-equivalents each unit books (static partitioning: whole GPUs)
    units: list[Placement]
    pool: int
    start: float
    leaving: int = 0  # units on their way out (a reclaim's notice runs)
    parked: bool = False  # those units stay on their GPUs until they leave (nobody was booked there)
    idle_notice: bool = False  # an idle policy reclaims it (its notice runs): no reclaim may take it
    record: int = 0  # the index of the request's record
    age: int = 0  # how victims of equal priority rank (newest first): the grant's number unless set
    since: float = 0.0  # when its period began (its request was decided: a reclaim's beneficiary before it starts)
    asked_end: float = float("inf")  # when its period ends: ``since`` + its request's ``requested_s``

    @property
    def amount(self) -> Decimal:
        return self.per_unit * len(self.units)


@dataclass
class Pools:
    """The clusters a policy places on (one shared, or one per department) and their policies;
    ``modes``: each cluster's GPUs of MIG nodes (``twin.replay.mig_modes``)."""

    clusters: list[Cluster]
    policies: list[PlacementPolicy] = field(default_factory=list)
    modes: list[MigModes] = field(default_factory=list)

    @classmethod
    def build(cls, node_groups: Sequence[Sequence[Node]], workload: Workload) -> Pools:
        clusters = [Cluster(nodes_at_rest(nodes)) for nodes in node_groups]
        modes = [MigModes(cluster, nodes) for cluster, nodes in zip(clusters, node_groups, strict=True)]
        return cls(clusters, [default_policy(workload) for _ in clusters], modes)

    def place_all(self, pool: int, request: Request, quantity: int) -> list[Placement] | None:
        """Book ``quantity`` units of ``request`` on the pool, all or none."""
        cluster, policy = self.clusters[pool], self.policies[pool]
        placed: list[Placement] = []
        for _ in range(quantity):
            decision = self._place_one(pool, request) if self.modes and self.modes[pool] else \
                place(cluster, request, policy, explain=False)
            if not isinstance(decision, Placement):
                self.release(pool, placed)
                return None
            if not (self.modes and self.modes[pool]):
                cluster.apply(decision)
            placed.append(decision)
        return placed

    def _place_one(self, pool: int, request: Request) -> Placement | None:
        """One unit on a pool with MIG nodes, booked: a share on the GPUs opened (no MIG node's
        GPU takes it), a MIG unit on a carved GPU first and else opened, a whole GPU at rest, as
        the portal's attempt places them (``allocations.booking.attempts``)."""
        cluster, policy, modes = self.clusters[pool], self.policies[pool], self.modes[pool]
        if request.kind is not RequestKind.SHARED:
            decision = place(cluster, request, policy, explain=False)
            if isinstance(decision, Placement) or request.kind is not RequestKind.MIG:
                return self._booked(pool, decision)
        with modes.opened():
            return self._booked(pool, place(cluster, request, policy, explain=False))

    def _booked(self, pool: int, decision: object) -> Placement | None:
        if not isinstance(decision, Placement):
            return None
        self.modes[pool].ready(decision)
        self.clusters[pool].apply(decision)
        return decision

    def fits(self, pool: int, request: Request) -> bool:
        """Whether one unit of ``request`` finds a node now (where a MIG unit or a share would be
        placed opened, the GPUs opened)."""
        cluster = self.clusters[pool]
        if self.modes and self.modes[pool] and request.kind in (RequestKind.SHARED, RequestKind.MIG):
            with self.modes[pool].opened():
                return bool(cluster.feasible(request).any())
        return bool(cluster.feasible(request).any())

    def release(self, pool: int, units: Iterable[Placement]) -> None:
        units = list(units)
        for unit in reversed(units):
            self.clusters[pool].release(unit)
        if self.modes and self.modes[pool]:
            self.modes[pool].settle(units)

    def apply(self, pool: int, units: Iterable[Placement]) -> None:
        for unit in units:
            if self.modes and self.modes[pool]:
                self.modes[pool].ready(unit)
            self.clusters[pool].apply(unit)

    def gpu_milli_booked(self) -> int:
        return sum(cluster.allocated_milli() for cluster in self.clusters)


def unit_request(shape: Shape, *, whole: bool = False) -> Request:
    """The placement engine's request for one unit (``whole``: a share takes the whole GPU)."""
    if shape.mig_profile is not None and not whole:
        return Request(0, 0, shape.num_gpu, GPU_MILLI, shape.mig_profile, shape.models)
    milli = GPU_MILLI if whole else shape.gpu_milli
    return Request(0, 0, shape.num_gpu, milli, None, shape.models)


def workload_of(jobs: Iterable[Job], *, whole: bool = False) -> Workload:
    """The typical unit shapes the binpack policy keeps room for (the portal counts its flavors'
    units the same way: ``allocations.booking.reservations.placement_workload``)."""
    return Workload.from_requests(unit_request(job.shape, whole=whole) for job in jobs)


def partition(nodes: Sequence[Node], shares: Sequence[float]) -> list[list[Node]]:
    """Whole nodes dealt to departments in proportion to ``shares``: nodes sorted by GPU model and
    size, each to the department furthest below its share of GPUs (ties: the first). Each
    department so owns a proportional mix of models."""
    total = sum(len(node.gpus) for node in nodes)
    owned = [0] * len(shares)
    groups: list[list[Node]] = [[] for _ in shares]
    weight = sum(shares) or 1.0
    ordered = sorted(nodes, key=lambda n: (n.gpus[0].model if n.gpus else "", -len(n.gpus), n.name))
    for node in ordered:
        deficits = [share / weight * total - have for share, have in zip(shares, owned, strict=True)]
        best = max(range(len(shares)), key=lambda k: (deficits[k], -k))
        groups[best].append(node)
        owned[best] += len(node.gpus)
    return groups

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
from placement.policies import Policy as PlacementPolicy
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
    """The clusters a policy places on (one shared, or one per department) and their policies."""

    clusters: list[Cluster]
    policies: list[PlacementPolicy] = field(default_factory=list)

    @classmethod
    def build(cls, node_groups: Sequence[Sequence[Node]], workload: Workload) -> Pools:
        clusters = [Cluster(list(nodes)) for nodes in node_groups]
        return cls(clusters, [default_policy(workload) for _ in clusters])

    def place_all(self, pool: int, request: Request, quantity: int) -> list[Placement] | None:
        """Book ``quantity`` units of ``request`` on the pool, all or none."""
        cluster, policy = self.clusters[pool], self.policies[pool]
        placed: list[Placement] = []
        for _ in range(quantity):
            decision = place(cluster, request, policy, explain=False)
            if not isinstance(decision, Placement):
                self.release(pool, placed)
                return None
            cluster.apply(decision)
            placed.append(decision)
        return placed

    def release(self, pool: int, units: Iterable[Placement]) -> None:
        for unit in reversed(list(units)):
            self.clusters[pool].release(unit)

    def apply(self, pool: int, units: Iterable[Placement]) -> None:
        for unit in units:
            self.clusters[pool].apply(unit)

    def gpu_milli_booked(self) -> int:
        return sum(cluster.allocated_milli() for cluster in self.clusters)


def unit_request(shape: Shape, *, whole: bool = False) -> Request:
    """The placement engine's request for one unit (``whole``: a share takes the whole GPU)."""
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

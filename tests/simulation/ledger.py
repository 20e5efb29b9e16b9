"""The simulator's ledger: raw rows read after every step (allocations, live reservations, quotas,
windows, nodes), and the arithmetic over them written here, never borrowed from the services:
what a grant weighs, when it really holds (a reclaiming grant until its deadline, a grant waiting
for its victims from their deadline), what a department holds at an instant, its effective numbers.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from accounting.idle_models import IdleCase
from allocations.models import Allocation, Flavor, PriorityClass, Quota, QuotaWindow, QuotaWindowEdge, Reservation
from clusters.models import Gpu, Node
from tenants.models import Department
from tests.simulation import windows_eval
from tests.simulation.windows_eval import WindowRow

HOLDING = frozenset({"scheduled", "approved", "provisioning", "active", "failed", "reclaiming"})
ON_CLUSTER = frozenset({"approved", "provisioning", "active", "failed", "reclaiming"})
FINAL = frozenset({"rejected", "cancelled", "released", "expired", "reclaimed"})
FOUR = Decimal("0.0001")


@dataclass(frozen=True)
class Grant:
    id: int
    department_id: int
    flavor_id: int
    quantity: int
    class_id: int
    state: str
    starts_at: datetime.datetime
    ends_at: datetime.datetime
    deadline: datetime.datetime | None
    reclaimed_for: int | None
    cluster_id: int | None
    decided_at: datetime.datetime | None
    reclaim_units: int | None = None

    @property
    def pending_reclaim(self) -> bool:
        """A reclaim under way: all of it (``reclaiming``) or some units (``reclaim_units``)."""
        return self.state == "reclaiming" or (self.reclaim_units is not None and self.state in HOLDING)

    @property
    def kept_units(self) -> int:
        """The units it holds once its reclaim's deadline passed."""
        if self.state == "reclaiming":
            return 0
        return self.quantity - (self.reclaim_units or 0) if self.state in HOLDING else 0


@dataclass(frozen=True)
class Span:
    start: datetime.datetime
    end: datetime.datetime
    weight: Decimal
    grant: Grant


@dataclass(frozen=True)
class Booking:
    id: int
    allocation_id: int
    unit: int
    node_id: int
    gpus: tuple[int, ...]
    milli: int
    mig_profile: str
    mig_start: int | None
    cpu: int
    memory: int


@dataclass(frozen=True)
class FlavorRow:
    name: str
    gpu_equivalents: Decimal
    mode: str
    mig_profile: str


@dataclass(frozen=True)
class ClassRow:
    name: str
    value: int
    factor: Decimal
    notice: int
    preempts: bool


@dataclass(frozen=True)
class QuotaRow:
    id: int
    department_id: int
    flavor_id: int | None
    guaranteed: Decimal
    limit: Decimal


@dataclass(frozen=True)
class NodeRow:
    name: str
    schedulable: bool
    cpu: int
    memory: int
    gpus: frozenset[int]


@dataclass
class Snapshot:
    at: datetime.datetime
    grants: dict[int, Grant]
    bookings: dict[int, Booking]
    flavors: dict[int, FlavorRow]
    classes: dict[int, ClassRow]
    quotas: dict[tuple[int, int | None], QuotaRow]
    windows: list[WindowRow]
    nodes: dict[int, NodeRow]
    parents: dict[int, int | None]
    slugs: dict[int, str]
    edges: set[tuple[int, datetime.datetime, str]]
    edge_reclaimed: dict[tuple[int, datetime.datetime, str], tuple[int, ...]]
    idle_reclaimed: frozenset[int]
    _victims: dict[int, list[Grant]] = field(default_factory=dict)
    _subtrees: dict[int, frozenset[int]] = field(default_factory=dict)
    _active: dict[int, tuple[datetime.datetime, datetime.datetime] | None] = field(default_factory=dict)
    _spans: dict[tuple[int, int | None, int | None], list[Span]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        victims: dict[int, list[Grant]] = defaultdict(list)
        for grant in self.grants.values():
            if grant.pending_reclaim and grant.reclaimed_for is not None:
                victims[grant.reclaimed_for].append(grant)
        self._victims = dict(victims)

    # ---------------------------------------------------------------- the tree

    def chain(self, department_id: int) -> list[int]:
        out = []
        current: int | None = department_id
        while current is not None:
            out.append(current)
            current = self.parents.get(current)
        return out

    def subtree(self, department_id: int) -> frozenset[int]:
        if department_id not in self._subtrees:
            self._subtrees[department_id] = frozenset(d for d in self.parents if department_id in self.chain(d))
        return self._subtrees[department_id]

    # --------------------------------------------------------------- the grants

    def victims_of(self, grant_id: int) -> list[Grant]:
        """The grants giving back units, or all of theirs, for this one (it waits for them)."""
        return self._victims.get(grant_id, [])

    def active(self, grant: Grant) -> tuple[datetime.datetime, datetime.datetime] | None:
        """When the grant really holds: its interval, cut at its reclaim deadline, and started no
        earlier than the deadlines of the grants reclaiming for it. None when it holds nothing."""
        if grant.id in self._active:
            return self._active[grant.id]
        span: tuple[datetime.datetime, datetime.datetime] | None = None
        if grant.state in HOLDING:
            start, end = grant.starts_at, grant.ends_at
            if grant.state == "reclaiming" and grant.deadline is not None:
                end = min(end, grant.deadline)  # a partial reclaim holds on, with fewer units (``spans``)
            for victim in self.victims_of(grant.id):
                if victim.deadline is not None:
                    start = max(start, victim.deadline)
            span = (start, end) if start < end else None
        self._active[grant.id] = span
        return span

    def spans(self, department_id: int, scope: int | None, class_id: int | None = None) -> list[Span]:
        """The holding grants of the department's subtree that weigh in ``scope``: when each really
        holds, its weight and the grant."""
        key = (department_id, scope, class_id)
        if key not in self._spans:
            subtree = self.subtree(department_id)
            found = []
            for grant in self.grants.values():
                if grant.department_id not in subtree or (class_id is not None and grant.class_id != class_id):
                    continue
                span = self.active(grant)
                weight = self.weight(grant, scope)
                if span is None or not weight:
                    continue
                cut = grant.deadline if grant.reclaim_units and grant.pending_reclaim and grant.deadline else None
                if cut is None or not span[0] < cut < span[1]:
                    found.append(Span(span[0], span[1], weight, grant))
                    continue
                found.append(Span(span[0], cut, weight, grant))
                kept = self.weight(grant, scope, units=grant.kept_units)
                if kept:
                    found.append(Span(cut, span[1], kept, grant))
            self._spans[key] = found
        return self._spans[key]

    def weight(self, grant: Grant, scope: int | None, *, units: int | None = None) -> Decimal:
        quantity = grant.quantity if units is None else units
        if scope is None:
            return (self.flavors[grant.flavor_id].gpu_equivalents * quantity).quantize(FOUR)
        return Decimal(quantity) if grant.flavor_id == scope else Decimal(0)

    def booking_end(self, booking: Booking, end: datetime.datetime) -> datetime.datetime:
        """When a booking stops holding: a unit a partial reclaim gives back (its grant's highest
        numbered) at the reclaim's deadline."""
        grant = self.grants[booking.allocation_id]
        if not (grant.reclaim_units and grant.pending_reclaim and grant.deadline):
            return end
        units = sorted((b.unit for b in self.bookings.values() if b.allocation_id == grant.id), reverse=True)
        return min(end, grant.deadline) if booking.unit in units[: grant.reclaim_units] else end

    def holds(self, department_id: int, scope: int | None, at: datetime.datetime, *, class_id: int | None = None,
              only: set[int] | None = None, without: frozenset[int] = frozenset()) -> Decimal:
        """What the department's subtree holds in ``scope`` at ``at`` (one class's grants, or only
        the grants in ``only``, when given; never those in ``without``)."""
        return sum((span.weight for span in self.spans(department_id, scope, class_id)
                    if span.start <= at < span.end and (only is None or span.grant.id in only)
                    and span.grant.id not in without), Decimal(0))

    def shown_in_use(self, department_id: int, scope: int | None, at: datetime.datetime) -> Decimal:
        """What a page should show as in use at ``at``: the holding grants whose interval holds it."""
        subtree = self.subtree(department_id)
        return sum((self.weight(g, scope) for g in self.grants.values() if g.state in HOLDING
                    and g.department_id in subtree and g.starts_at <= at < g.ends_at), Decimal(0))

    # ----------------------------------------------------------------- quotas

    def windows_of(self, quota_id: int) -> list[WindowRow]:
        return [row for row in self.windows if row.quota_id == quota_id]

    def effective(self, quota: QuotaRow, at: datetime.datetime, class_id: int | None = None) -> tuple[Decimal, Decimal]:
        guaranteed, limit, _ = windows_eval.effective(guaranteed=quota.guaranteed, limit=quota.limit,
                                                      rows=self.windows_of(quota.id), at=at, priority_class_id=class_id)
        return guaranteed, limit

    def points(self, start: datetime.datetime, end: datetime.datetime, quota_ids: list[int]) -> list[datetime.datetime]:
        """``start`` and every instant in ``(start, end)`` where a holding changes or a window of
        these quotas begins or ends an occurrence: the sums and the limits are constant between."""
        found = {start}
        for grant in self.grants.values():
            span = self.active(grant)
            if span is not None and span[0] < end and span[1] > start:
                found.update(moment for moment in span if start < moment < end)
        rows = [row for row in self.windows if row.quota_id in quota_ids and row.state == "approved"]
        found |= windows_eval.change_points(rows, start, end)
        return sorted(found)


def _window_row(row: QuotaWindow) -> WindowRow:
    return WindowRow(
        id=row.pk, quota_id=row.quota_id, kind=row.kind, state=row.state, begins_at=row.begins_at, ends_at=row.ends_at,
        rrule=row.rrule, zone=row.timezone, duration_minutes=row.duration_minutes,
        guaranteed_delta=row.guaranteed_delta, limit_delta=row.limit_delta, guaranteed=row.guaranteed,
        limit=row.limit, priority_class_id=row.priority_class_id, shrink_policy=row.shrink_policy,
        decided_at=row.decided_at,
    )


PARTS = frozenset({"catalog", "windows", "nodes", "edges", "idle", "tree"})
"""What a snapshot may re-read besides the grants and their bookings (read after every step)."""


def snapshot_read(at: datetime.datetime, *, previous: Snapshot | None = None, parts: frozenset[str] = PARTS) -> Snapshot:
    """Every row the invariants need, each table in one ordered query; what ``parts`` leaves out is
    taken from ``previous`` (the step could not have changed it)."""
    if previous is None:
        parts = PARTS
    grants = {
        row[0]: Grant(*row)
        for row in Allocation.objects.order_by("pk").values_list(
            "pk", "project__department_id", "flavor_id", "quantity", "priority_class_id", "state", "starts_at",
            "ends_at", "reclaim_deadline", "reclaimed_for_id", "cluster_id", "decided_at", "reclaim_units",
        )
    }
    bookings = {
        row[0]: Booking(row[0], row[1], row[2], row[3], tuple(row[4]), row[5], row[6], row[7], row[8], row[9])
        for row in Reservation.objects.filter(released_at__isnull=True).order_by("pk").values_list(
            "pk", "allocation_id", "unit", "node_id", "gpu_indices", "gpu_milli", "mig_profile", "mig_start",
            "cpu_millicores", "memory_mib",
        )
    }
    kept = {name: getattr(previous, name) for name in ("flavors", "classes", "quotas", "windows", "nodes", "parents",
                                                       "slugs", "edges", "edge_reclaimed", "idle_reclaimed")} if previous else {}
    if "catalog" in parts:
        kept["flavors"], kept["classes"], kept["quotas"] = _catalog()
    if "windows" in parts:
        kept["windows"] = [_window_row(row) for row in QuotaWindow.objects.order_by("pk")]
    if "nodes" in parts:
        kept["nodes"] = _nodes()
    if "tree" in parts:
        departments = list(Department.objects.order_by("pk").values_list("pk", "parent_id", "slug"))
        kept["parents"] = {pk: parent for pk, parent, _ in departments}
        kept["slugs"] = {pk: slug for pk, _, slug in departments}
    if "edges" in parts:
        edge_rows = list(QuotaWindowEdge.objects.order_by("pk").values_list("window_id", "at", "kind", "reclaimed"))
        kept["edges"] = {(w, a, k) for w, a, k, _ in edge_rows}
        kept["edge_reclaimed"] = {(w, a, k): tuple(r) for w, a, k, r in edge_rows}
    if "idle" in parts:
        kept["idle_reclaimed"] = frozenset(
            IdleCase.objects.filter(state="reclaimed").values_list("allocation_id", flat=True))
    return Snapshot(at=at, grants=grants, bookings=bookings, **kept)


def _catalog() -> tuple[dict[int, FlavorRow], dict[int, ClassRow], dict[tuple[int, int | None], QuotaRow]]:
    quotas: dict[tuple[int, int | None], QuotaRow]
    flavors = {pk: FlavorRow(name, eq, mode, profile) for pk, name, eq, mode, profile in
               Flavor.objects.order_by("pk").values_list("pk", "name", "gpu_equivalents", "sharing_mode", "mig_profile")}
    classes = {
        pk: ClassRow(name, value, factor, 0 if preemptible else notice, policy == "PreemptLowerPriority")
        for pk, name, value, factor, notice, preemptible, policy in PriorityClass.objects.order_by("pk").values_list(
            "pk", "name", "value", "oversubscription_factor", "notice_minutes", "preemptible", "preemption_policy")
    }
    quotas = {(d, f): QuotaRow(pk, d, f, g, lim) for pk, d, f, g, lim in
              Quota.objects.order_by("pk").values_list("pk", "department_id", "flavor_id", "guaranteed", "limit")}
    return flavors, classes, quotas


def _nodes() -> dict[int, NodeRow]:
    gpus: dict[int, set[int]] = defaultdict(set)
    for node_id, index in Gpu.objects.order_by("pk").values_list("node_id", "index"):
        gpus[node_id].add(index)
    return {pk: NodeRow(name, schedulable, cpu, memory, frozenset(gpus[pk])) for pk, name, schedulable, cpu, memory in
            Node.objects.order_by("pk").values_list("pk", "name", "is_schedulable", "cpu_millicores", "memory_mib")}

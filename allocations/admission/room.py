"""The GPUs a request would use, as admission asks about them: the candidate clusters during the
request's interval, each read once when first needed, with some grants' units taken away (a
*cut*: allocation id → how many of its units, the highest-numbered ones, as a resize and a partial
reclaim give them back)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from django.db.models import Q

from allocations.booking.attempts import Attempt, AttemptAsk, placement_attempt
from allocations.booking.policy import placement_policy_for
from allocations.booking.preview import dry_run_key
from allocations.booking.reservations import placement_workload
from allocations.booking.state import ClusterState, RowKey, cluster_state
from allocations.booking.tenancy import Tenant, tenant_of
from allocations.booking.view import NodeRow
from allocations.catalogue.states import HOLDING_STATES
from allocations.models import Allocation, Reservation
from allocations.quotas.victims import Cut
from clusters.models import Cluster
from kernel.reads import SharedReads
from placement import Workload


def rows_without(rows: list[Reservation], keys: dict[int, RowKey], cut: Mapping[int, int]) -> list[Reservation]:
    """``rows`` less, for each allocation of ``cut``, the rows of its highest-numbered units (as many
    units as the cut says)."""
    if not cut:
        return rows
    units: dict[int, list[int]] = defaultdict(list)
    for row in rows:
        allocation_id = keys[id(row)].allocation
        if allocation_id in cut:
            units[allocation_id].append(row.unit)
    gone = {(allocation_id, unit) for allocation_id, found in units.items()
            for unit in sorted(found, reverse=True)[: cut[allocation_id]]}
    return [row for row in rows if (keys[id(row)].allocation, row.unit) not in gone]


@dataclass
class Room:
    """The GPUs of the candidate clusters during the request's interval, each cluster read once,
    when first needed."""

    allocation: Allocation
    clusters: list[Cluster]
    promised: dict[int, int] = field(default_factory=dict)
    """The grants whose units a reclaim gives back to this request (id → how many): not in its way."""
    nodes: dict[int, list[NodeRow]] = field(default_factory=dict)
    rows: dict[int, list[Reservation]] = field(default_factory=dict)
    tried: dict[Cut, list[Attempt]] = field(default_factory=dict)
    workload: Workload | None = None
    tenant: Tenant | None = None
    reads: SharedReads | None = None
    """A page's shared reads, where its placement preview left its dry runs."""
    states: dict[int, ClusterState] = field(default_factory=dict)
    """Each cluster's kept placement state (read when first needed, unless the caller, which holds
    the clusters' rows, gave it)."""

    def read(self, cluster: Cluster) -> None:
        if cluster.pk in self.nodes:
            return
        start, end = self.allocation.starts_at, self.allocation.ends_at
        state = self.states.get(cluster.pk)
        if state is None:
            state = self.states[cluster.pk] = cluster_state(cluster=cluster)
        nodes = state.nodes_of(self.allocation.flavor.gpu_model)
        self.nodes[cluster.pk] = nodes
        # The grants whose interval misses the request's hold nothing it could use; the rest of a
        # holder's rows count, whatever the holder (a row of a non-holding allocation is kept busy).
        elsewhere = set(
            Allocation.objects.filter(cluster_id=cluster.pk, state__in=HOLDING_STATES)
            .filter(Q(starts_at__gte=end) | Q(ends_at__lte=start))
            .values_list("pk", flat=True)
        )
        skip = {self.allocation.pk} | elsewhere
        rows = state.rows_of_model(self.allocation.flavor.gpu_model)
        if (skip | set(self.promised)) & state.allocations():  # else the state's own list: its kept picture
            rows = [row for row in rows if state.keys[id(row)].allocation not in skip]
            rows = rows_without(rows, state.keys, self.promised)
        self.rows[cluster.pk] = rows

    def _dry_run(self, cluster: Cluster) -> Attempt | None:
        """The page's dry run of the request on ``cluster`` (``allocations.booking.preview``), when
        it saw exactly these rows and placed (or failed to place) this request's units one by one:
        its first units are this attempt."""
        state = self.states[cluster.pk]
        if self.reads is None or self.rows[cluster.pk] is not state.rows_of_model(self.allocation.flavor.gpu_model):
            return None
        dry = self.reads.known(dry_run_key(cluster=cluster, flavor=self.allocation.flavor, tenant=self.tenant))
        quantity = self.allocation.quantity
        return dry.first(quantity) if isinstance(dry, Attempt) and dry.knows(quantity) else None

    def attempts(self, victims: Cut) -> list[Attempt]:
        if victims not in self.tried:
            if self.workload is None:
                self.workload = placement_workload(include=self.allocation.flavor)
            if self.tenant is None:
                self.tenant = tenant_of(self.allocation.project)
            found: list[Attempt] = []
            for cluster in self.clusters:
                self.read(cluster)
                dry = None if victims else self._dry_run(cluster)
                flavor, quantity = self.allocation.flavor, self.allocation.quantity
                ask = AttemptAsk(cluster, flavor, quantity, placement_policy_for(flavor, self.workload), self.tenant)
                attempt = dry or placement_attempt(
                    ask, nodes=self.nodes[cluster.pk], reservations=self._without(cluster.pk, victims),
                    state=self.states[cluster.pk],
                )
                found.append(attempt)
                if attempt.complete:
                    break
            self.tried[victims] = found
        return self.tried[victims]

    def _without(self, cluster_id: int, victims: Cut) -> list[Reservation]:
        return rows_without(self.rows[cluster_id], self.states[cluster_id].keys, dict(victims))

    def fits(self, victims: Cut) -> bool:
        if frozenset() in self.tried and self.tried[frozenset()][-1].complete:
            return True  # taking grants away only frees GPUs
        attempts = self.attempts(victims)
        return bool(attempts) and attempts[-1].complete

    def placed(self, victims: Cut) -> Attempt | None:
        attempts = self.attempts(victims)
        if attempts and attempts[-1].complete:
            return attempts[-1]
        if victims and self.fits(frozenset()):
            return self.attempts(frozenset())[-1]
        return None

    def units_on(self) -> dict[int, list[str]]:
        """Each grant's units in the candidate clusters' GPUs: the node (``cluster/node``) of each,
        in unit order (the highest-numbered leave first), for room on one node."""
        out: dict[int, list[str]] = defaultdict(list)
        for cluster in self.clusters:
            self.read(cluster)
            names = {row.pk: f"{cluster.name}/{row.node.name}" for row in self.nodes[cluster.pk]}
            keys = self.states[cluster.pk].keys
            for row in sorted(self.rows[cluster.pk], key=lambda found: (keys[id(found)].allocation, found.unit)):
                key = keys[id(row)]
                out[key.allocation].append(names.get(key.node, f"{cluster.name}/#{key.node}"))
        return dict(out)

    def on_clusters(self) -> set[int]:
        for cluster in self.clusters:
            self.read(cluster)
        return {row.allocation_id for rows in self.rows.values() for row in rows}

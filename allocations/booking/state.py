"""Each cluster's placement state, kept in memory per process and brought up to date from what
changed, instead of being read and rebuilt for every approval (docs/placement.md, "Kept state").

What the engine needs of a cluster is its inventory (nodes and GPUs) and its live reservations.

* **Reservations.** Every change of a cluster's reservations (a booking, a release, a move)
  bumps ``Cluster.placement_version`` in its own transaction (:func:`placement_version_bump`)
  and stamps the rows it writes with the new version (``Reservation.changed_version``). The bump
  is an UPDATE of the cluster's row, so the writers of one cluster's reservations follow each
  other, and a version read from the database is committed with every change stamped with it or
  below. A kept state at version ``v`` is brought to version ``w`` by reading the rows stamped
  above ``v``, whatever happened to them since (applying a row twice is harmless). An approval
  holds the cluster's row FOR UPDATE, so nothing changes under it until it commits.
* **Inventory.** Nodes and GPUs change rarely and through many paths (discovery, the node agent,
  the admin site, bulk statements), so database triggers stamp every change on the node's row
  (``clusters.stamps``); a fingerprint of the cluster's nodes (how many, the highest id, the sum
  of their stamps) is read each time, and when it moved everything is read again.

The engine's pictures of a state are kept too (``allocations.booking.kept_views``), brought
forward by rebuilding only the nodes that changed; ``tests/placement/test_kept_state.py`` checks
that a kept state and its pictures equal a fresh read and build after random sequences of
bookings, releases, moves and inventory changes, across processes, and
``tests/procs/test_many_processes.py`` that each of two real web processes keeps a state equal to one.

Kept states are immutable snapshots shared between threads; a newer one replaces an older one.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import Count, F, Max, Sum

from allocations.booking.usage import with_spans
from allocations.booking.view import (
    NodeRow,
    node_rows,
)
from allocations.models import Reservation
from clusters.models import Cluster, Node
from clusters.stamps import PLACEMENT_VERSION_SEQUENCE

RELOAD_AFTER_SECONDS = 300.0
"""A kept state is read afresh at least this often, whatever its version and fingerprint say: a
bound on staleness should rows ever change behind both (a restored backup with equal numbers)."""
LOG_LIMIT = 2048
"""How many versions back a kept picture can be brought forward; older ones are rebuilt."""

Fingerprint = tuple[int, int, int]


_BUMPED = threading.local()
"""Per thread: cluster id → the transaction (PostgreSQL's id) that last moved its version here."""


def placement_version_bump(*, cluster_id: int) -> int:
    """Move ``cluster_id``'s placement version forward (in the caller's transaction, which then holds
    the cluster's row until it ends) and return the new version, to stamp the reservations it
    writes. Versions grow per cluster (the UPDATE reads the row's latest version once it holds
    it); on PostgreSQL they come from a sequence, so they also grow roughly across clusters and
    the rows changed since a version are few (``Reservation.changed_version`` is indexed)."""
    table = connection.ops.quote_name(Cluster._meta.db_table)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"UPDATE {table} SET placement_version = GREATEST(placement_version + 1, "  # noqa: S608 - constants
                f"nextval('{PLACEMENT_VERSION_SEQUENCE}')) WHERE id = %s RETURNING placement_version, "
                "pg_current_xact_id()::text",
                [cluster_id],
            )
        else:
            cursor.execute(
                f"UPDATE {table} SET placement_version = placement_version + 1 "  # noqa: S608 - quoted names
                "WHERE id = %s RETURNING placement_version, ''",
                [cluster_id],
            )
        row = cursor.fetchone()
    if row is None:
        raise Cluster.DoesNotExist(f"cluster {cluster_id}")
    bumped: dict[int, str] = vars(_BUMPED).setdefault("clusters", {})
    bumped[cluster_id] = str(row[1])
    return int(row[0])


def reservations_restamp(*, allocation_id: int) -> int:
    """Stamp the allocation's live rows with their cluster's next placement version, after its
    interval changed (a renewal): when a row holds its GPUs is part of what the kept states and
    pictures know of it (``allocations.booking.usage``). Takes the cluster's row as releasing does
    (after the allocation's, kernel/locks.py). Returns how many rows were stamped."""
    rows = Reservation.objects.filter(allocation_id=allocation_id, released_at__isnull=True)
    stamped = 0
    for cluster_id in sorted(set(rows.values_list("node__cluster_id", flat=True))):
        version = placement_version_bump(cluster_id=cluster_id)
        stamped += rows.filter(node__cluster_id=cluster_id).update(changed_version=version)
    return stamped


def _written_here(cluster_id: int) -> bool:
    """Whether this thread's open transaction moved the cluster's version: its rows are then not
    committed, and a state read now must not be kept for others."""
    bumped: dict[int, str] = vars(_BUMPED).setdefault("clusters", {})
    mine = bumped.get(cluster_id)
    if mine is None:
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_xact_id_if_assigned()::text")
        current = cursor.fetchone()[0]
    if current == mine:
        return True
    bumped.pop(cluster_id, None)  # that transaction ended (committed or not)
    return False


def inventory_fingerprint(*, cluster_id: int) -> Fingerprint:
    """How many nodes, the highest id, the sum of their inventory stamps (``clusters.stamps``: any
    write to a node or its GPUs moves its stamp)."""
    found = Node.objects.filter(cluster_id=cluster_id).aggregate(count=Count("id"), top=Max("id"),
                                                                 stamps=Sum("inventory_stamp"))
    return int(found["count"]), int(found["top"] or 0), int(found["stamps"] or 0)


def version_and_fingerprint(*, cluster_id: int) -> tuple[int, Fingerprint]:
    """The cluster's placement version and inventory fingerprint, in one query."""
    version, count, top, stamps = (
        Cluster.objects.filter(pk=cluster_id)
        .annotate(count=Count("nodes"), top=Max("nodes__id"), stamps=Sum("nodes__inventory_stamp"))
        .values_list("placement_version", "count", "top", "stamps")
        .get()
    )
    return int(version), (int(count), int(top or 0), int(stamps or 0))


def _live_rows(queryset: Any) -> list[Reservation]:
    """Reservation rows as placement reads them, each with ``kept_project``: its allocation's project,
    and its allocation's interval (``with_spans``: when it holds what it books)."""
    return list(with_spans(queryset.defer("created_at", "release_reason"))
                .annotate(kept_project=F("allocation__project_id")).order_by("pk"))


class RowKey(NamedTuple):
    """A live row's facts as plain values (its model attributes go through descriptors: slow in
    loops over thousands of rows)."""

    pk: int
    node: int
    allocation: int
    project: int


def _key(row: Reservation) -> RowKey:
    return RowKey(row.pk, row.node_id, row.allocation_id, int(row.kept_project))  # type: ignore[attr-defined]


@dataclass(frozen=True)
class ClusterState:
    """One cluster's nodes and live reservations at ``version``. Shared between threads: never
    change it, nor the lists it hands out."""

    cluster_id: int
    version: int
    fingerprint: Fingerprint
    nodes: tuple[NodeRow, ...]
    ordered: dict[int, Reservation]
    """The live rows by primary key, in its order."""
    keys: dict[int, RowKey]
    """``id(row)`` → its facts, for every live row."""
    by_node: dict[int, tuple[Reservation, ...]]
    log: tuple[tuple[int, int, frozenset[int]], ...] = ()
    """(from version, to version, nodes whose reservations changed), oldest first, a chain."""
    by_model: dict[str, list[NodeRow]] = field(default_factory=dict)
    loaded_at: float = field(default_factory=time.monotonic)
    shared: bool = True
    """False: read by a transaction that changed the cluster (or on SQLite): never kept."""
    memo: dict[Any, Any] = field(default_factory=dict, compare=False)
    """What is derived from the state once (per GPU model): filled when first asked for."""
    inventory_memo: dict[Any, Any] = field(default_factory=dict, compare=False)
    """What is derived from the nodes alone: kept by the states brought forward from this one."""
    model_rows: dict[str, dict[int, Reservation]] = field(default_factory=dict)
    """GPU model → the live rows on its nodes, by primary key in its order."""
    allocation_rows: dict[int, int] = field(default_factory=dict)
    """Allocation → how many live rows it holds."""
    project_rows: dict[int, int] = field(default_factory=dict)
    """Project → how many live rows it holds."""

    def nodes_of(self, gpu_model: str | None) -> list[NodeRow]:
        """What ``node_rows(cluster, gpu_model=...)`` reads, in the same order."""
        if gpu_model is None:
            return list(self.nodes)
        return self.by_model.get(gpu_model, [])

    def reservations(self, node_ids: Iterable[int] | None = None) -> list[Reservation]:
        """The live reservations (on ``node_ids``), in primary-key order."""
        if node_ids is None:
            return list(self.ordered.values())
        wanted = set(node_ids)
        keys = self.keys
        return [row for row in self.ordered.values() if keys[id(row)].node in wanted]

    def rows_of_model(self, gpu_model: str) -> list[Reservation]:
        """The live rows on the nodes with a GPU of ``gpu_model`` (the same list each time: a
        picture asked for exactly these rows is the kept one)."""
        key = ("rows", gpu_model)
        if key not in self.memo:
            self.memo[key] = list(self.model_rows.get(gpu_model, {}).values())
        rows: list[Reservation] = self.memo[key]
        return rows

    def row_ids_of_model(self, gpu_model: str) -> frozenset[int]:
        key = ("ids", gpu_model)
        if key not in self.memo:
            self.memo[key] = frozenset(map(id, self.rows_of_model(gpu_model)))
        ids: frozenset[int] = self.memo[key]
        return ids

    def projects(self) -> frozenset[int]:
        """The projects holding a live row."""
        return frozenset(self.project_rows)

    def allocations(self) -> frozenset[int]:
        """The allocations holding a live row."""
        return frozenset(self.allocation_rows)

    def changed_since(self, version: int) -> frozenset[int] | None:
        """The nodes whose reservations changed after ``version``; None when the log does not reach
        back to it (the picture is then built again)."""
        if version == self.version:
            return frozenset()
        for position, (since, _, _) in enumerate(self.log):
            if since == version:
                return frozenset().union(*(nodes for _, _, nodes in self.log[position:]))
        return None


def _by_model(nodes: Iterable[NodeRow]) -> dict[str, list[NodeRow]]:
    out: dict[str, list[NodeRow]] = {}
    for row in nodes:
        for model in dict.fromkeys(gpu.model for gpu in row.gpus):
            out.setdefault(model, []).append(row)
    return out


def _index(rows: Iterable[Reservation], keys: dict[int, RowKey]) -> dict[int, tuple[Reservation, ...]]:
    grouped: dict[int, list[Reservation]] = {}
    for row in rows:
        grouped.setdefault(keys[id(row)].node, []).append(row)
    return {node: tuple(items) for node, items in grouped.items()}


def state_load(*, cluster: Cluster, version: int, fingerprint: Fingerprint) -> ClusterState:
    """Everything read afresh (``version`` and ``fingerprint`` read before the rows)."""
    nodes = tuple(node_rows(cluster))
    rows = _live_rows(Reservation.objects.filter(released_at__isnull=True, node__cluster_id=cluster.pk))
    keys = {id(row): _key(row) for row in rows}
    by_model = _by_model(nodes)
    models = _node_models(by_model)
    model_rows: dict[str, dict[int, Reservation]] = {model: {} for model in by_model}
    allocation_rows: Counter[int] = Counter()
    project_rows: Counter[int] = Counter()
    for row in rows:
        key = keys[id(row)]
        for model in models.get(key.node, ()):
            model_rows[model][key.pk] = row
        allocation_rows[key.allocation] += 1
        project_rows[key.project] += 1
    return ClusterState(cluster_id=cluster.pk, version=version, fingerprint=fingerprint, nodes=nodes,
                        ordered={row.pk: row for row in rows}, keys=keys, by_node=_index(rows, keys),
                        by_model=by_model, model_rows=model_rows, allocation_rows=dict(allocation_rows),
                        project_rows=dict(project_rows))


def _node_models(by_model: dict[str, list[NodeRow]]) -> dict[int, tuple[str, ...]]:
    out: dict[int, tuple[str, ...]] = {}
    for model, rows in by_model.items():
        for row in rows:
            out[row.pk] = (*out.get(row.pk, ()), model)
    return out


def _counted(counts: dict[int, int], *, minus: Iterable[int], plus: Iterable[int]) -> dict[int, int]:
    out = dict(counts)
    for item in minus:
        out[item] -= 1
        if not out[item]:
            del out[item]
    for item in plus:
        out[item] = out.get(item, 0) + 1
    return out


def state_advance(state: ClusterState, *, version: int) -> ClusterState:
    """``state`` brought to ``version`` from the rows stamped above its own (a row stamped again
    since replaces the one kept; applying a row twice changes nothing)."""
    changed = _live_rows(Reservation.objects.filter(changed_version__gt=state.version, node__cluster_id=state.cluster_id))
    stamped = {row.pk for row in changed}
    arriving = [row for row in changed if row.released_at is None]
    leaving = [state.ordered[pk] for pk in stamped if pk in state.ordered]
    keys = dict(state.keys)
    for row in leaving:
        del keys[id(row)]
    for row in arriving:
        keys[id(row)] = _key(row)
    ordered = dict(state.ordered)
    for row in leaving:
        del ordered[state.keys[id(row)].pk]
    last = next(reversed(ordered), 0)
    for row in arriving:
        ordered[keys[id(row)].pk] = row
    if arriving and keys[id(arriving[0])].pk < last:  # a row committed out of its id's order
        ordered = dict(sorted(ordered.items()))
    nodes = {state.keys[id(row)].node for row in leaving} | {keys[id(row)].node for row in arriving}
    by_node = dict(state.by_node)
    for node in nodes:
        here = tuple(row for row in by_node.get(node, ()) if state.keys[id(row)].pk not in stamped) + tuple(
            row for row in arriving if keys[id(row)].node == node
        )
        if here:
            by_node[node] = here
        else:
            by_node.pop(node, None)
    log = (*state.log, (state.version, version, frozenset(nodes)))[-LOG_LIMIT:]
    if "node models" not in state.inventory_memo:
        state.inventory_memo["node models"] = _node_models(state.by_model)
    models: dict[int, tuple[str, ...]] = state.inventory_memo["node models"]
    model_rows = dict(state.model_rows)
    for model in {model for node in nodes for model in models.get(node, ())}:
        on_model = dict(model_rows[model])
        for row in leaving:
            on_model.pop(state.keys[id(row)].pk, None)
        tail = next(reversed(on_model), 0)
        for row in arriving:
            if model in models.get(keys[id(row)].node, ()):
                on_model[keys[id(row)].pk] = row
        if arriving and keys[id(arriving[0])].pk < tail:
            on_model = dict(sorted(on_model.items()))
        model_rows[model] = on_model
    gone = [state.keys[id(row)] for row in leaving]
    came = [keys[id(row)] for row in arriving]
    return ClusterState(cluster_id=state.cluster_id, version=version, fingerprint=state.fingerprint,
                        nodes=state.nodes, ordered=ordered, keys=keys, by_node=by_node, log=log,
                        by_model=state.by_model, loaded_at=state.loaded_at, inventory_memo=state.inventory_memo,
                        model_rows=model_rows,
                        allocation_rows=_counted(state.allocation_rows, minus=[key.allocation for key in gone],
                                                 plus=[key.allocation for key in came]),
                        project_rows=_counted(state.project_rows, minus=[key.project for key in gone],
                                              plus=[key.project for key in came]))


_LOCK = threading.Lock()
_STATES: dict[int, ClusterState] = {}


def cluster_state(*, cluster: Cluster, locked: bool = False) -> ClusterState:
    """The kept state of ``cluster``, brought up to date. ``locked``: the caller holds the cluster's
    row FOR UPDATE (an approval), so ``cluster.placement_version`` is current and stays so.

    A state read by a transaction that changed the cluster's reservations itself holds rows not
    yet committed (and perhaps never): it is used by that transaction and kept for nobody, which
    PostgreSQL's transaction id tells. SQLite (the embedded default, one small cluster) cannot
    tell, so states are read afresh each time there."""
    if locked:
        version, fingerprint = int(cluster.placement_version), inventory_fingerprint(cluster_id=cluster.pk)
    else:
        version, fingerprint = version_and_fingerprint(cluster_id=cluster.pk)
    if connection.vendor != "postgresql":
        return replace(state_load(cluster=cluster, version=version, fingerprint=fingerprint), shared=False)
    shared = not _written_here(cluster.pk)
    with _LOCK:
        state = _STATES.get(cluster.pk)
    if (state is None or state.fingerprint != fingerprint or state.version > version
            or time.monotonic() - state.loaded_at > RELOAD_AFTER_SECONDS):
        state = state_load(cluster=cluster, version=version, fingerprint=fingerprint)
    elif state.version < version:
        state = state_advance(state, version=version)
    if not shared:
        return replace(state, shared=False)
    with _LOCK:
        current = _STATES.get(cluster.pk)
        if current is None or current.version <= state.version or current.fingerprint != state.fingerprint:
            _STATES[cluster.pk] = state
    return state


def kept_states_forget() -> None:
    """Drop every kept state and picture (tests; a process that changed rows behind our back)."""
    with _LOCK:
        _STATES.clear()
        for forget in FORGET_HOOKS:
            forget()


FORGET_HOOKS: list[Callable[[], None]] = []
"""What else is kept from the states (the kept pictures register here)."""



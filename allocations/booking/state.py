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

The engine's pictures (:class:`~allocations.booking.view.PlacementView`) are kept too, per unit
shape, at the version they reflect, and brought forward by rebuilding only the nodes that changed.
A picture for another set of reservations (those of the request's interval, without the grants it
would reclaim, with the units it has just placed) or for a tenant who may not use some nodes is a
copy with only the differing nodes rebuilt. :func:`kept_view` gives exactly what
``placement_view`` builds from scratch; ``tests/placement/test_kept_state.py`` checks it after
random sequences of bookings, releases, moves and inventory changes, across processes.

Kept states are immutable snapshots shared between threads; a newer one replaces an older one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from django.db import connection
from django.db.models import Count, F, Max, Sum

from allocations.booking.tenancy import Exclusion
from allocations.booking.view import (
    NodeRow,
    PlacementView,
    UnitShape,
    ViewRows,
    engine_node,
    node_rows,
    placement_view,
    reservation_usage,
    view_finish,
    view_rows,
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


def placement_version_read(*, cluster_id: int) -> int:
    return int(Cluster.objects.filter(pk=cluster_id).values_list("placement_version", flat=True).get())


def inventory_fingerprint(*, cluster_id: int) -> Fingerprint:
    """How many nodes, the highest id, the sum of their inventory stamps (``clusters.stamps``: any
    write to a node or its GPUs moves its stamp)."""
    found = Node.objects.filter(cluster_id=cluster_id).aggregate(count=Count("id"), top=Max("id"),
                                                                 stamps=Sum("inventory_stamp"))
    return int(found["count"]), int(found["top"] or 0), int(found["stamps"] or 0)


def _live_rows(queryset: Any) -> list[Reservation]:
    """Reservation rows as placement reads them, each with ``kept_project``: its allocation's project."""
    return list(queryset.defer("created_at", "release_reason").annotate(kept_project=F("allocation__project_id"))
                .order_by("pk"))


def _projects(rows: Iterable[Reservation], into: dict[int, int] | None = None) -> dict[int, int]:
    out = dict(into or {})
    for row in rows:
        out[row.allocation_id] = int(row.kept_project)  # type: ignore[attr-defined]  # annotated above
    return out


@dataclass(frozen=True)
class ClusterState:
    """One cluster's nodes and live reservations at ``version`` (do not change it: it is shared)."""

    cluster_id: int
    version: int
    fingerprint: Fingerprint
    nodes: tuple[NodeRow, ...]
    live: dict[int, Reservation]
    by_node: dict[int, tuple[Reservation, ...]]
    projects: dict[int, int] = field(default_factory=dict)
    """Allocation id → project id of every live row (to know the tenants without reading them)."""
    log: tuple[tuple[int, frozenset[int]], ...] = ()
    """(version, nodes whose reservations changed then), oldest first, at most ``LOG_LIMIT``."""
    by_model: dict[str, list[NodeRow]] = field(default_factory=dict)
    loaded_at: float = field(default_factory=time.monotonic)
    shared: bool = True
    """False: read by a transaction that changed the cluster (or on SQLite): never kept."""

    def nodes_of(self, gpu_model: str | None) -> list[NodeRow]:
        """What ``node_rows(cluster, gpu_model=...)`` reads, in the same order."""
        if gpu_model is None:
            return list(self.nodes)
        return self.by_model.get(gpu_model, [])

    def reservations(self, node_ids: Iterable[int] | None = None) -> list[Reservation]:
        """The live reservations (on ``node_ids``), in primary-key order."""
        if node_ids is None:
            return sorted(self.live.values(), key=lambda row: row.pk)
        wanted = set(node_ids)
        return sorted((row for node in wanted for row in self.by_node.get(node, ())), key=lambda row: row.pk)

    def changed_since(self, version: int) -> frozenset[int] | None:
        """The nodes whose reservations changed after ``version``; None when the log does not reach back."""
        if version == self.version:
            return frozenset()
        if version > self.version or not self.log or self.log[0][0] > version + 1:
            return None
        return frozenset().union(*(nodes for stamped, nodes in self.log if stamped > version))


def _by_model(nodes: Iterable[NodeRow]) -> dict[str, list[NodeRow]]:
    out: dict[str, list[NodeRow]] = {}
    for row in nodes:
        for model in dict.fromkeys(gpu.model for gpu in row.gpus):
            out.setdefault(model, []).append(row)
    return out


def _index(rows: Iterable[Reservation]) -> dict[int, tuple[Reservation, ...]]:
    grouped: dict[int, list[Reservation]] = {}
    for row in rows:
        grouped.setdefault(row.node_id, []).append(row)
    return {node: tuple(items) for node, items in grouped.items()}


def state_load(*, cluster: Cluster, version: int, fingerprint: Fingerprint) -> ClusterState:
    """Everything read afresh (``version`` and ``fingerprint`` read before the rows)."""
    nodes = tuple(node_rows(cluster))
    rows = _live_rows(Reservation.objects.filter(released_at__isnull=True, node__cluster_id=cluster.pk))
    return ClusterState(cluster_id=cluster.pk, version=version, fingerprint=fingerprint, nodes=nodes,
                        live={row.pk: row for row in rows}, by_node=_index(rows), by_model=_by_model(nodes),
                        projects=_projects(rows))


def state_advance(state: ClusterState, *, version: int) -> ClusterState:
    """``state`` brought to ``version`` from the rows stamped above its own."""
    changed = _live_rows(Reservation.objects.filter(changed_version__gt=state.version, node__cluster_id=state.cluster_id))
    live = dict(state.live)
    nodes: set[int] = set()
    for row in changed:
        old = live.pop(row.pk, None)
        if old is not None:
            nodes.add(old.node_id)
        if row.released_at is None:
            live[row.pk] = row
            nodes.add(row.node_id)
    by_node = dict(state.by_node)
    for node in nodes:
        kept = tuple(row for row in live.values() if row.node_id == node) if len(nodes) > 64 else None
        if kept is None:
            ids = {row.pk for row in changed}
            kept = tuple(row for row in state.by_node.get(node, ()) if row.pk not in ids) + tuple(
                row for row in changed if row.node_id == node and row.released_at is None
            )
        if kept:
            by_node[node] = kept
        else:
            by_node.pop(node, None)
    log = (*state.log, (version, frozenset(nodes)))[-LOG_LIMIT:]
    return ClusterState(cluster_id=state.cluster_id, version=version, fingerprint=state.fingerprint,
                        nodes=state.nodes, live=live, by_node=by_node, log=log, by_model=state.by_model,
                        projects=_projects(changed, into=state.projects), loaded_at=state.loaded_at)


_LOCK = threading.Lock()
_STATES: dict[int, ClusterState] = {}


def cluster_state(*, cluster: Cluster, locked: bool = False) -> ClusterState:
    """The kept state of ``cluster``, brought up to date. ``locked``: the caller holds the cluster's
    row FOR UPDATE (an approval), so ``cluster.placement_version`` is current and stays so.

    A state read by a transaction that changed the cluster's reservations itself holds rows not
    yet committed (and perhaps never): it is used by that transaction and kept for nobody, which
    PostgreSQL's transaction id tells. SQLite (the embedded default, one small cluster) cannot
    tell, so states are read afresh each time there."""
    version = int(cluster.placement_version) if locked else placement_version_read(cluster_id=cluster.pk)
    fingerprint = inventory_fingerprint(cluster_id=cluster.pk)
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
        _VIEWS.clear()


@dataclass(frozen=True)
class KeptView:
    version: int
    fingerprint: Fingerprint
    rows: ViewRows
    view: PlacementView


ViewKey = tuple[int, UnitShape, bool, bool, bool]
_VIEWS: dict[ViewKey, KeptView] = {}


def _base_view(state: ClusterState, *, cluster: Cluster, shape: UnitShape, carve: bool) -> KeptView:
    """The picture of every live reservation, no tenant rule, at ``state``'s version."""
    key: ViewKey = (cluster.pk, shape, carve, cluster.use_hami, cluster.use_volcano)
    with _LOCK:
        kept = _VIEWS.get(key)
    if kept is not None and kept.fingerprint == state.fingerprint and kept.version == state.version and state.shared:
        return kept
    fresh: KeptView | None = None
    if kept is not None and kept.fingerprint == state.fingerprint and kept.view.engine is not None:
        changed = state.changed_since(kept.version)
        if changed is not None:
            fresh = _forward(kept, state=state, shape=shape, carve=carve, nodes=changed)
    if fresh is None:
        rows = view_rows(cluster=cluster, shape=shape, nodes=state.nodes_of(shape.gpu_model))
        view = placement_view(cluster=cluster, shape=shape, nodes=rows.offering + rows.pinned,
                              reservations=state.reservations(row.node.pk for row in rows.offering + rows.pinned),
                              open_empty_gpus=carve)
        fresh = KeptView(state.version, state.fingerprint, rows, view)
    if state.shared:
        with _LOCK:
            current = _VIEWS.get(key)
            if current is None or current.version <= fresh.version or current.fingerprint != fresh.fingerprint:
                _VIEWS[key] = fresh
    return fresh


def _forward(kept: KeptView, *, state: ClusterState, shape: UnitShape, carve: bool, nodes: frozenset[int]) -> KeptView | None:
    view = _rebuilt(kept.view, rows=kept.rows, shape=shape, carve=carve, nodes=nodes,
                    reservations=state.reservations(nodes | {row.node.pk for row in kept.rows.pinned}),
                    exclusion=Exclusion())
    return None if view is None else KeptView(state.version, state.fingerprint, kept.rows, view)


def _rebuilt(
    base: PlacementView, *, rows: ViewRows, shape: UnitShape, carve: bool, nodes: Iterable[int],
    reservations: list[Reservation], exclusion: Exclusion,
) -> PlacementView | None:
    """``base`` with the offering ``nodes`` rebuilt from ``reservations`` (which must hold every row
    on them and on the pinned nodes) under ``exclusion``; None when the engine cannot take a node
    in place (rebuild it whole then)."""
    usage = reservation_usage(reservations)
    per_gpu, cpu, memory = usage
    engine = base.engine.copy() if base.engine is not None else None
    wanted = set(nodes)
    if engine is not None:
        for row in rows.offering:
            if row.node.pk in wanted:
                rebuilt = engine_node(row=row, per_gpu=per_gpu, cpu=cpu, memory=memory, carve_empty=carve,
                                      exclusion=exclusion)
                if not engine.node_replace(engine.index[row.node.name], rebuilt):
                    return None
    return view_finish(cluster=base.cluster, shape=shape, rows=rows, exclusion=exclusion, usage=usage, engine=engine)


def kept_view(
    state: ClusterState,
    *,
    cluster: Cluster,
    shape: UnitShape,
    reservations: list[Reservation],
    open_empty_gpus: bool | None = None,
    exclusion: Exclusion | None = None,
) -> PlacementView:
    """What ``placement_view`` would build for these arguments (``nodes``: the state's), from the
    kept picture: only the nodes where ``reservations`` differ from the live ones, or that the
    tenant may not wholly use, are rebuilt."""
    excluded = exclusion if exclusion is not None else Exclusion()
    carve = shape.mig_profile is not None if open_empty_gpus is None else open_empty_gpus
    base = _base_view(state, cluster=cluster, shape=shape, carve=carve)
    given = {row.pk for row in reservations if row.pk is not None}
    touched = {row.node_id for row in reservations if row.pk is None or row.pk not in state.live}
    touched.update(row.node_id for pk, row in state.live.items() if pk not in given)
    touched.update(excluded.nodes)
    touched.update(node for node, _ in excluded.gpus)
    pinned = {row.node.pk for row in base.rows.pinned}
    if not touched and not pinned and not excluded:
        view = base.view
        return PlacementView(cluster=cluster, shape=shape, nodes=dict(view.nodes),
                             engine=view.engine.copy() if view.engine is not None else None,
                             pinned_free=[], pinned_room={}, left_out={})
    wanted = touched | pinned
    rebuilt = _rebuilt(base.view, rows=base.rows, shape=shape, carve=carve, nodes=touched,
                       reservations=[row for row in reservations if row.node_id in wanted], exclusion=excluded)
    if rebuilt is not None:
        rebuilt.cluster = cluster
        return rebuilt
    return placement_view(cluster=cluster, shape=shape, nodes=base.rows.offering + base.rows.pinned,
                          reservations=reservations, open_empty_gpus=carve, exclusion=excluded)

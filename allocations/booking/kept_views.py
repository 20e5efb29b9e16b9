"""The engine's pictures of a cluster kept per process, brought forward from the kept state
(``allocations.booking.state``) by rebuilding only the nodes that changed.

A picture (:class:`~allocations.booking.view.PlacementView`) is kept per cluster and unit shape for
the live reservations and no tenant rule, at the version of the state it reflects. What placement
asks for is often another picture: the reservations of the request's interval, without the grants
it would reclaim, with the units it has just placed, for a tenant kept off some nodes. That one is a
copy of the kept picture with only the differing nodes rebuilt. :func:`kept_view` gives exactly what
``placement_view`` builds from scratch (tests/placement/test_kept_state.py).

Rows are told apart by identity: the state hands out its own row objects, so a caller's list that
holds them is compared with sets of ``id()`` at C speed; a row it does not know (a unit just
placed, a row read elsewhere) marks its node for rebuilding.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from allocations.booking.state import FORGET_HOOKS, ClusterState, Fingerprint
from allocations.booking.tenancy import (
    UNKNOWN_TENANT,
    DepartmentTree,
    Exclusion,
    Holding,
    Tenant,
    project_tenants,
    tenancy_exclusion,
)
from allocations.booking.usage import reservation_usage
from allocations.booking.view import (
    NodeRow,
    PlacementView,
    UnitShape,
    ViewRows,
    engine_nodes_replace,
    placement_view,
    view_finish,
    view_rows,
)
from allocations.models import Reservation
from clusters.models import Cluster, NodeSharing


@dataclass(frozen=True)
class KeptView:
    version: int
    fingerprint: Fingerprint
    rows: ViewRows
    view: PlacementView


ViewKey = tuple[int, UnitShape, bool, bool, bool]
_LOCK = threading.Lock()
_VIEWS: dict[ViewKey, KeptView] = {}
FORGET_HOOKS.append(_VIEWS.clear)


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
                              reservations=state.reservations(row.pk for row in rows.offering + rows.pinned),
                              open_empty_gpus=carve)
        fresh = KeptView(state.version, state.fingerprint, rows, view)
    if state.shared:
        with _LOCK:
            current = _VIEWS.get(key)
            if current is None or current.version <= fresh.version or current.fingerprint != fresh.fingerprint:
                _VIEWS[key] = fresh
    return fresh


def _forward(kept: KeptView, *, state: ClusterState, shape: UnitShape, carve: bool, nodes: frozenset[int]) -> KeptView | None:
    wanted = nodes | {row.pk for row in kept.rows.pinned}
    view = _rebuilt(kept.view, rows=kept.rows, terms=_Settled(shape, carve, Exclusion()), nodes=nodes,
                    reservations=[row for node in wanted for row in state.by_node.get(node, ())])
    return None if view is None else KeptView(state.version, state.fingerprint, kept.rows, view)


@dataclass(frozen=True)
class PictureTerms:
    """What a picture is of: the unit ``shape``, whether an empty GPU may be carved for it
    (``open_empty_gpus``; None: only for a MIG shape) and what the tenant may not use."""

    shape: UnitShape
    open_empty_gpus: bool | None = None
    exclusion: Exclusion | None = None

    def settled(self) -> _Settled:
        carve = self.shape.mig_profile is not None if self.open_empty_gpus is None else self.open_empty_gpus
        return _Settled(self.shape, carve, self.exclusion if self.exclusion is not None else Exclusion())


@dataclass(frozen=True)
class _Settled:
    """Picture terms with their defaults filled in: a carve decided, an exclusion (maybe empty)."""

    shape: UnitShape
    carve: bool
    exclusion: Exclusion


def _rebuilt(
    base: PlacementView, *, rows: ViewRows, terms: _Settled, nodes: set[int] | frozenset[int],
    reservations: list[Reservation],
) -> PlacementView | None:
    """``base`` with the offering ``nodes`` rebuilt from ``reservations`` (which must hold every row
    on them and on the pinned nodes) under ``terms`` (settled); None when the engine cannot take a
    node in place (rebuild it whole then)."""
    shape, carve, exclusion = terms.shape, terms.carve, terms.exclusion
    usage = reservation_usage(reservations)
    engine = base.engine.copy() if base.engine is not None else None
    if engine is not None and nodes and not engine_nodes_replace(
        engine, rows=[row for row in rows.offering if row.pk in nodes], usage=usage, carve_empty=carve,
        exclusion=exclusion,
    ):
        return None
    return view_finish(cluster=base.cluster, shape=shape, rows=rows, exclusion=exclusion, usage=usage, engine=engine,
                       nodes=base.nodes if not base.left_out else None)


def kept_view(
    state: ClusterState,
    *,
    cluster: Cluster,
    terms: PictureTerms,
    reservations: list[Reservation],
    extra: list[Reservation] | None = None,
) -> PlacementView:
    """What ``placement_view`` would build for these arguments (``nodes``: the state's;
    reservations: ``reservations`` and then ``extra``, units not stored yet; ``terms``: its shape,
    ``open_empty_gpus`` and ``exclusion``), from the kept picture: only the nodes where the rows
    differ from the live ones, or that the tenant may not wholly use, are rebuilt."""
    settled = terms.settled()
    shape, carve, excluded = settled.shape, settled.carve, settled.exclusion
    base = _base_view(state, cluster=cluster, shape=shape, carve=carve)
    pinned = {row.pk for row in base.rows.pinned}
    touched: set[int] = set(excluded.nodes) | {node for node, _ in excluded.gpus}
    missing: frozenset[int] = frozenset()
    extra = list(extra or ())
    if reservations is not state.rows_of_model(shape.gpu_model):
        live = state.row_ids_of_model(shape.gpu_model)
        given = set(map(id, reservations))
        missing = live - given
        touched.update(state.keys[row_id].node for row_id in missing)
        if len(given) > len(live) - len(missing):
            extra += [row for row in reservations if id(row) not in live]
    touched.update(row.node_id for row in extra)
    if not touched and not pinned:
        view = base.view
        return PlacementView(cluster=cluster, shape=shape, nodes=view.nodes,
                             engine=view.engine.copy() if view.engine is not None else None,
                             pinned_free=[], pinned_room={}, left_out={})
    if len(touched) * 2 < len(base.rows.offering) + 2:
        wanted = touched | pinned
        rows = [row for node in wanted for row in state.by_node.get(node, ()) if id(row) not in missing]
        rows += [row for row in extra if row.node_id in wanted]
        rebuilt = _rebuilt(base.view, rows=base.rows, terms=settled, nodes=touched, reservations=rows)
        if rebuilt is not None:
            rebuilt.cluster = cluster
            return rebuilt
    return placement_view(cluster=cluster, shape=shape, nodes=base.rows.offering + base.rows.pinned,
                          reservations=[*reservations, *extra], open_empty_gpus=carve, exclusion=excluded)


def _node_sets(state: ClusterState, nodes: list[NodeRow]) -> tuple[set[int], set[int]]:
    """The ids of ``nodes`` and of those sharing through MPS (once per inventory for the state's
    own lists of a model's nodes)."""
    own = any(nodes is rows for rows in state.by_model.values())
    key = ("node sets", id(nodes))
    if own and key in state.inventory_memo:
        found: tuple[set[int], set[int]] = state.inventory_memo[key]
        return found
    sets = {row.pk for row in nodes}, {row.pk for row in nodes if row.node.sharing == NodeSharing.MPS}
    if own:
        state.inventory_memo[key] = sets
    return sets


def kept_exclusion(
    state: ClusterState, *, tenant: Tenant | None, nodes: list[NodeRow], reservations: list[Reservation]
) -> Exclusion | None:
    """What ``allocations.booking.sharing.exclusion_for`` finds, from the state's facts about its
    rows; None when ``reservations`` hold a stored row the state does not know (ask it then)."""
    tenant = tenant if tenant is not None else UNKNOWN_TENANT
    on, mps = _node_sets(state, nodes)
    keys = state.keys
    projects = state.projects()
    tenants = project_tenants(project_ids=projects, tree=DepartmentTree.load()) if projects else {}
    dedicated = {project for project, other in tenants.items() if other.dedicated}
    if not tenant.dedicated and not mps and not dedicated:
        return Exclusion() if all(id(row) in keys or row.pk is None for row in reservations) else None
    holdings = []
    for row in reservations:
        key = keys.get(id(row))
        if key is None:
            if row.pk is not None:
                return None
            continue  # a unit of the attempt itself: the tenant's own
        if key.node in on and key.project in tenants and (tenant.dedicated or key.node in mps or key.project in dedicated):
            holdings.append(Holding(key.node, tuple(int(index) for index in row.gpu_indices), tenants[key.project]))
    return tenancy_exclusion(tenant=tenant, holdings=holdings, mps_node_ids=dict.fromkeys(mps, True))

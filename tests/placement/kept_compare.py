"""A kept placement state and its pictures against a fresh read and build from the database.

Shared by the property test in one process (``tests/placement/test_kept_state.py``, two simulated
processes) and by the test-only check each real web process runs on itself
(``tests/procs/kept_check.py``, for ``tests/procs/test_many_processes.py``). Returns the
differences in words, so that a process can report them as data.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from allocations.booking import kept_views
from allocations.booking import state as kept
from allocations.booking.sharing import shape_under_reserve
from allocations.booking.tenancy import Exclusion
from allocations.booking.view import PlacementView, node_rows, placement_view, unit_shape
from allocations.models import Allocation, Flavor, Reservation
from clusters.models import Cluster

ROW_FIELDS = ("pk", "allocation_id", "node_id", "gpu_indices", "gpu_milli", "mig_profile", "mig_start",
              "cpu_millicores", "memory_mib")


def picture(view: PlacementView) -> dict[str, Any]:
    """Everything placement reads of a picture, as plain data."""
    engine = view.engine
    return {
        "nodes": sorted(view.nodes),
        "left_out": dict(view.left_out),
        "pinned_free": sorted((node.name, index, start) for node, index, start in view.pinned_free),
        "pinned_room": dict(view.pinned_room),
        "engine": None if engine is None else {
            "inventory": [(node.name, node.cpu_milli, node.memory_mib, node.gpus, node.cpu_used_milli,
                           node.memory_used_mib) for node in engine.nodes()],
            "free": (engine.cpu_free.tolist(), engine.mem_free.tolist()),
        },
    }


def _rows(rows: list[Reservation]) -> list[tuple[Any, ...]]:
    return [tuple(getattr(row, name) for name in ROW_FIELDS) for row in rows]


def state_differences(state: kept.ClusterState, *, cluster: Cluster) -> list[str]:
    """Where the state's version, nodes and live rows differ from the database's."""
    found: list[str] = []
    fresh_nodes = node_rows(cluster)
    fresh_live = list(Reservation.objects.filter(released_at__isnull=True, node__cluster=cluster).order_by("pk"))
    if state.version != cluster.placement_version:
        found.append(f"version {state.version}, the database's {cluster.placement_version}")
    if [(row.node.pk, row.node.name, row.node.is_schedulable, row.node.sharing, row.gpus) for row in state.nodes] != [
        (row.node.pk, row.node.name, row.node.is_schedulable, row.node.sharing, row.gpus) for row in fresh_nodes
    ]:
        found.append("nodes differ")
    kept_rows, live_rows = _rows(state.reservations()), _rows(fresh_live)
    if kept_rows != live_rows:
        found.append(f"live rows differ: kept only {sorted(set(kept_rows) - set(live_rows))[:5]}, "
                     f"database only {sorted(set(live_rows) - set(kept_rows))[:5]}")
    project_of = dict(Allocation.objects.filter(pk__in={row.allocation_id for row in fresh_live})
                      .values_list("pk", "project_id"))
    if state.allocation_rows != dict(Counter(row.allocation_id for row in fresh_live)):
        found.append("the live rows per allocation differ")
    if state.project_rows != dict(Counter(project_of[row.allocation_id] for row in fresh_live)):
        found.append("the live rows per project differ")
    by_node: dict[int, list[int]] = {}
    for row in fresh_live:
        by_node.setdefault(row.node_id, []).append(row.pk)
    if {node: sorted(row.pk for row in rows) for node, rows in state.by_node.items()} != by_node:
        found.append("the live rows per node differ")
    return found


def differences(state: kept.ClusterState, *, cluster_id: int, rng: random.Random) -> list[str]:
    """Every difference between ``state`` (with the pictures derived from it) and a fresh read
    and build: for each flavor's unit shape (MIG ones carved open and not), the picture of the
    live reservations, and of a request's subset of them without some grants for a tenant kept
    off some nodes (``rng`` picks which)."""
    cluster = Cluster.objects.get(pk=cluster_id)
    found = state_differences(state, cluster=cluster)
    fresh_live = list(Reservation.objects.filter(released_at__isnull=True, node__cluster=cluster).order_by("pk"))
    by_pk = state.ordered
    for flavor in Flavor.objects.order_by("pk"):
        nodes = node_rows(cluster, gpu_model=flavor.gpu_model)
        memory = max((gpu.memory_mib for row in nodes for gpu in row.gpus), default=0)
        shape = shape_under_reserve(shape=unit_shape(flavor), flavor=flavor, cluster=cluster, gpu_memory_mib=memory)
        on = {row.node.pk for row in nodes}
        live = [row for row in fresh_live if row.node_id in on]
        if [row.pk for row in state.rows_of_model(flavor.gpu_model)] != [row.pk for row in live]:
            found.append(f"{flavor.name}: the rows on its model's nodes differ")
        holders = sorted({row.allocation_id for row in live})
        without = set(rng.sample(holders, k=min(len(holders), rng.randint(0, 3))))
        subset = [row for row in live if row.allocation_id not in without]
        exclusion = Exclusion(nodes={row.node.pk: "kept apart" for row in nodes if rng.random() < 0.3})
        for carve in ((True, False) if flavor.mig_profile else (None,)):
            for rows, apart in ((live, Exclusion()), (subset, exclusion)):
                mine = [by_pk.get(row.pk, row) for row in rows]  # the kept rows where it has them
                derived = kept_views.kept_view(state, cluster=cluster, reservations=mine,
                                               terms=kept_views.PictureTerms(shape, carve, apart))
                scratch = placement_view(cluster=cluster, shape=shape, nodes=nodes, reservations=rows,
                                         open_empty_gpus=carve, exclusion=apart)
                if picture(derived) != picture(scratch):
                    found.append(f"{flavor.name}: the picture differs (carve {carve}, "
                                 f"{'a subset, some nodes kept apart' if apart else 'the live rows'})")
    return found

"""Why a flavor with driver/CUDA minimums finds no node: the nodes that would offer its units but
report older versions, or none (``allocations.models.versions``; ``view.node_offers`` leaves them out)."""

from __future__ import annotations

from dataclasses import replace

from allocations.booking.view import NodeRow, PlacementView, node_offers
from clusters.models import Node, NodeSharing

LISTED_NODES = 6
"""How many nodes the refusal names (then: "and N more")."""


def _offers_but_for_versions(row: NodeRow, view: PlacementView) -> bool:
    shape = view.shape
    if not any(gpu.model == shape.gpu_model for gpu in row.gpus):
        return False
    node = row.node
    pinned = bool(shape.mig_profile) and node.is_schedulable and node.sharing == NodeSharing.MIG and bool(node.mig_layout)
    relaxed = replace(shape, min_driver_version="", min_cuda_version="")
    return pinned or node_offers(node=node, shape=relaxed, cluster=view.cluster)


def minimums_refusal(*, view: PlacementView, nodes: list[NodeRow]) -> str:
    """When no node offers ``view``'s shape only because of the flavor's minimums: ``no node of
    cluster X reports driver ≥ 535 (a100-0: driver 470.57.02; a100-1: driver unknown)``.
    Empty when the minimums are not why (none set, or no node would offer the shape anyway)."""
    minimums = view.shape.minimums
    if not minimums:
        return ""
    below: list[Node] = [row.node for row in nodes if _offers_but_for_versions(row, view)]
    if not below:
        return ""
    listed = "; ".join(minimums.reported(node) for node in below[:LISTED_NODES])
    more = f"; and {len(below) - LISTED_NODES} more" if len(below) > LISTED_NODES else ""
    return (
        f"no node of cluster {view.cluster.name} that could offer {view.shape.describe()} reports "
        f"{minimums.describe()}, the flavor's minimum ({listed}{more})"
    )

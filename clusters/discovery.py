"""Discovery's inventory side: a cluster's Node objects and their GPU labels (GPU feature discovery)
become inventory nodes. Reading the objects from the cluster is delivery's (:mod:`delivery.discovery`).

A node counts as a GPU node when GFD labelled it (``nvidia.com/gpu.present=true`` or a GPU count).
Its GPUs are ``nvidia.com/gpu.count`` cards of ``nvidia.com/gpu.product`` (without GFD's
``-SHARED`` / ``-MIG-<profile>`` suffixes) with ``nvidia.com/gpu.memory`` MiB each. Inventory
nodes that the cluster no longer has are marked unschedulable, never deleted: allocations and the
audit log still refer to them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from audit import actions
from audit.services import audit_record
from clusters.inventory import GpuSpec, node_upsert
from clusters.models import Cluster, Node
from kernel.quantity import parse_quantity

_PRODUCT_SUFFIX = re.compile(r"(-MIG-[0-9a-z.+]+)?(-SHARED)?$")
KEPT_LABEL_PREFIXES = ("nvidia.com/", "kubernetes.io/hostname", "node.kubernetes.io/instance-type")


@dataclass(frozen=True)
class DiscoveredNode:
    name: str
    cpu_millicores: int
    memory_mib: int
    gpus: list[GpuSpec]
    labels: dict[str, str]


def node_from_object(node: dict[str, Any]) -> DiscoveredNode | None:
    """The inventory's view of one Node object; None when it has no GPU labels."""
    labels: dict[str, str] = node.get("metadata", {}).get("labels") or {}
    count = _int(labels.get("nvidia.com/gpu.count"))
    if labels.get("nvidia.com/gpu.present") != "true" and not count:
        return None
    capacity = node.get("status", {}).get("capacity") or {}
    product = _PRODUCT_SUFFIX.sub("", labels.get("nvidia.com/gpu.product", "unknown"))
    memory = _int(labels.get("nvidia.com/gpu.memory"))
    mig_capable = labels.get("nvidia.com/mig.capable") == "true"
    return DiscoveredNode(
        name=node["metadata"]["name"],
        cpu_millicores=int(parse_quantity(capacity.get("cpu", "0")) * 1000),
        memory_mib=int(parse_quantity(capacity.get("memory", "0")) / (1024 * 1024)),
        gpus=[GpuSpec(index=i, model=product, memory_mib=memory, mig_capable=mig_capable) for i in range(count)],
        labels={key: value for key, value in sorted(labels.items()) if key.startswith(KEPT_LABEL_PREFIXES)},
    )


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


@transaction.atomic
def cluster_nodes_record(*, actor: User | None, cluster: Cluster, found: list[DiscoveredNode]) -> list[Node]:
    """Record what discovery found: upsert the nodes it saw, mark the ones it no longer sees
    unschedulable, and audit the round."""
    nodes = [
        node_upsert(actor=actor, cluster=cluster, name=item.name, cpu_millicores=item.cpu_millicores,
                    memory_mib=item.memory_mib, gpus=item.gpus, labels=item.labels)
        for item in found
    ]
    Node.objects.filter(cluster=cluster, name__in=[item.name for item in found]).update(is_schedulable=True)
    gone = list(Node.objects.filter(cluster=cluster, is_schedulable=True).exclude(name__in=[item.name for item in found])
                .order_by("name").values_list("name", flat=True))
    Node.objects.filter(cluster=cluster, name__in=gone).update(is_schedulable=False)
    audit_record(
        actor=actor,
        action=actions.CLUSTER_DISCOVERED,
        target=cluster,
        details={"nodes": [item.name for item in found], "gpus": sum(len(item.gpus) for item in found), "gone": gone},
    )
    return nodes

"""Discovery: read the cluster's Node objects through its driver into the inventory."""

from __future__ import annotations

from django.contrib.auth.models import User

from clusters.discovery import cluster_nodes_record, node_from_object
from clusters.models import Cluster, Node
from delivery.drivers import driver_for
from tenants.access import require_platform_admin


def cluster_discover(*, actor: User | None, cluster_id: int) -> list[Node]:
    """Read the cluster's nodes into the inventory; raises DriverError when it cannot be reached."""
    if actor is not None:
        require_platform_admin(actor, to="run discovery")
    cluster = Cluster.objects.get(pk=cluster_id)
    driver = driver_for(cluster)
    try:
        objects = driver.read_nodes()
    finally:
        driver.close()
    found = [node for node in map(node_from_object, objects) if node is not None]
    return cluster_nodes_record(actor=actor, cluster=cluster, found=found)

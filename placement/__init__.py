"""Django-free placement engine: where a GPU request goes, or why it cannot go anywhere.

Typical use::

    cluster = Cluster.from_records(node_rows, reservation_rows)
    decision = place(cluster, Request(cpu_milli=8000, memory_mib=32768, gpu_count=1, gpu_milli=250))
    if isinstance(decision, Placement):
        cluster.apply(decision)
    else:
        print(decision.reason)
"""

from .cluster import Cluster
from .decisions import Placement, Rejection, RejectionKind, Request, RequestKind
from .inventory import Gpu, MigSlice, Node, node_from_record, nodes_from_records
from .mig import GEOMETRIES, MigGeometry, MigProfile, geometry_for_model
from .placing import place
from .policies import POLICY_NAMES, Policy, default_policy, make_policy
from .workload import TaskClass, Workload

__all__ = [
    "Cluster", "GEOMETRIES", "Gpu", "MigGeometry", "MigProfile", "MigSlice", "Node", "POLICY_NAMES", "Placement",
    "Policy", "Rejection", "RejectionKind", "Request", "RequestKind", "TaskClass", "Workload", "default_policy",
    "geometry_for_model", "make_policy", "node_from_record", "nodes_from_records", "place",
]

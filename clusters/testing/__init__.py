"""A real Kubernetes control plane for tests (no Django in here).

Quick use::

    from clusters.testing import KubeTestCluster, FakeGPUNodes, GPUNodeSpec

    with KubeTestCluster() as cluster, FakeGPUNodes(cluster.api_client) as nodes:
        nodes.add(GPUNodeSpec("gpu-a", gpus=8))
        ...

The binaries come from ``make kube-testenv`` (see docs/kube-testenv.md); pytest
users get the ``kube_cluster`` fixture from ``clusters.testing.pytest_plugin``.
"""

from clusters.testing.cluster import (
    DEFAULT_CONTROLLERS,
    ClusterOptions,
    ClusterStartError,
    KubeTestCluster,
)
from clusters.testing.gpu_nodes import FakeGPUNodes, GPUNodeSpec, mig_resource_name
from clusters.testing.paths import (
    ETCD_VERSION,
    KUBE_VERSION,
    BinariesMissing,
    KubeBinaries,
    find_binaries,
)
from clusters.testing.waiting import WaitTimeout, wait_for

__all__ = [
    "DEFAULT_CONTROLLERS",
    "ETCD_VERSION",
    "KUBE_VERSION",
    "BinariesMissing",
    "ClusterOptions",
    "ClusterStartError",
    "FakeGPUNodes",
    "GPUNodeSpec",
    "KubeBinaries",
    "KubeTestCluster",
    "WaitTimeout",
    "find_binaries",
    "mig_resource_name",
    "wait_for",
]

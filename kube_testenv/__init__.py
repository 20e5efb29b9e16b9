"""A real Kubernetes control plane for tests (no Django in here).

Quick use::

    from kube_testenv import KubeTestCluster, FakeGPUNodes, GPUNodeSpec

    with KubeTestCluster() as cluster, FakeGPUNodes(cluster.api_client) as nodes:
        nodes.add(GPUNodeSpec("gpu-a", gpus=8))
        ...

The binaries come from ``make kube-testenv`` (see docs/kube-testenv.md); pytest
users get the ``kube_cluster`` fixture from ``kube_testenv.pytest_plugin``.

Names are imported lazily: importing the official Kubernetes client takes
seconds, and the pytest plugin is loaded by every test run, including runs
that never touch a cluster.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kube_testenv.cluster import KubeTestCluster
    from kube_testenv.gpu_nodes import FakeGPUNodes, GPUNodeSpec, mig_resource_name
    from kube_testenv.launch import DEFAULT_CONTROLLERS, ClusterOptions
    from kube_testenv.paths import (
        ETCD_VERSION,
        KUBE_VERSION,
        BinariesMissing,
        KubeBinaries,
        find_binaries,
    )
    from kube_testenv.readiness import ClusterStartError
    from kube_testenv.waiting import WaitTimeout, wait_for

_EXPORTS = {
    "DEFAULT_CONTROLLERS": "launch",
    "ClusterOptions": "launch",
    "ClusterStartError": "readiness",
    "KubeTestCluster": "cluster",
    "FakeGPUNodes": "gpu_nodes",
    "GPUNodeSpec": "gpu_nodes",
    "mig_resource_name": "gpu_nodes",
    "ETCD_VERSION": "paths",
    "KUBE_VERSION": "paths",
    "BinariesMissing": "paths",
    "KubeBinaries": "paths",
    "find_binaries": "paths",
    "WaitTimeout": "waiting",
    "wait_for": "waiting",
}

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
assert sorted(__all__) == sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value

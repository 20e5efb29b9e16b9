"""The real API server of ``bench/scale.py``'s first cluster: the test control plane the kube tests
start (``kube_testenv``, binaries from ``make kube-testenv`` in ``.cache/kube-testenv``), with the
GPU operator's namespace and the cluster's nodes registered as plain Node objects (labels only:
the portal labels nodes and writes their ConfigMaps; nothing is scheduled on them, so no kubelet
heartbeats are faked for thousands of nodes)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from bench.scale_seed import GPUS_PER_NODE, NODE_KINDS, node_name


@dataclass(frozen=True)
class ApiServer:
    kubeconfig: str  # its text, for the portal's cluster
    nodes: int
    started_s: float
    registered_s: float
    cluster: Any  # the running KubeTestCluster

    def census(self) -> dict[str, int]:
        """What the portal's pushes left on the API server: the tenants' namespaces, their
        ResourceQuotas, and the GPU operator's ConfigMaps (node configurations)."""
        from kubernetes import client

        with self.cluster.api_client() as api:
            core = client.CoreV1Api(api)
            system = {"default", "kube-system", "kube-public", "kube-node-lease", "gpu-operator"}
            namespaces = [item.metadata.name for item in core.list_namespace().items]
            return {"namespaces": sum(name not in system for name in namespaces),
                    "resource_quotas": len(core.list_resource_quota_for_all_namespaces().items),
                    "operator_config_maps": len(core.list_namespaced_config_map("gpu-operator").items)}


class ApiServerMissing(RuntimeError):
    """The test control plane's binaries are not installed."""


@contextmanager
def api_server(nodes: int) -> Iterator[ApiServer]:
    """A test control plane with ``nodes`` nodes named as the seed names the first cluster's."""
    from kube_testenv import BinariesMissing, KubeTestCluster, find_binaries

    try:
        binaries = find_binaries()
    except BinariesMissing as error:
        raise ApiServerMissing(str(error)) from None
    began = time.perf_counter()
    with KubeTestCluster(binaries) as cluster:
        started = time.perf_counter() - began
        began = time.perf_counter()
        _register(cluster, nodes)
        yield ApiServer(kubeconfig=cluster.kubeconfig.read_text(), nodes=nodes, started_s=started,
                        registered_s=time.perf_counter() - began, cluster=cluster)


def _register(cluster: object, nodes: int) -> None:
    from kubernetes import client

    api_client = cluster.api_client  # type: ignore[attr-defined]
    with api_client() as api:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": "gpu-operator"}})

    def create(indices: range) -> None:
        with api_client() as api:
            core = client.CoreV1Api(api)
            for index in indices:
                model = NODE_KINDS[index % len(NODE_KINDS)][0]
                labels = {"nvidia.com/gpu.product": model, "nvidia.com/gpu.count": str(GPUS_PER_NODE)}
                core.create_node({"metadata": {"name": node_name(index), "labels": labels}})

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(create, [range(start, nodes, 8) for start in range(8)]))

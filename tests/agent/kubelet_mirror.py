"""A fake kubelet's device manager for one kwok node: what PodResources would list for its pods.

The kubelet allocates device ids to a container when it admits the pod and frees them when the pod
terminates or is removed. :class:`KubeletMirror` does the same from the API server's view of one
node: each :meth:`sync` gives every live (not Succeeded, Failed or deleting) pod bound to the node
the GPU UUIDs its containers' ``nvidia.com/gpu`` limits ask for, first free in order, keeping what
it gave before, and serves the result through a :class:`FakeKubelet`. Tests call ``sync`` after
each change they wait for, so what the agent reads is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubernetes import client

from tests.agent.fake_kubelet import FakeKubelet

GPU = "nvidia.com/gpu"
_FINISHED = ("Succeeded", "Failed")


class KubeletMirror:
    def __init__(self, kubelet: FakeKubelet, api: client.ApiClient, node: str, gpu_uuids: Sequence[str]) -> None:
        self.kubelet = kubelet
        self.node = node
        self.gpu_uuids = list(gpu_uuids)
        self._core = client.CoreV1Api(api)
        self._held: dict[tuple[str, str, str], list[str]] = {}  # (pod uid, namespace/name, container)

    def _live_pods(self) -> list[Any]:
        pods = self._core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node}").items
        live = [p for p in pods if p.metadata.deletion_timestamp is None and p.status.phase not in _FINISHED]
        return sorted(live, key=lambda p: (p.metadata.creation_timestamp, p.metadata.name))

    def sync(self) -> dict[tuple[str, str, str], list[str]]:
        """Free the devices of pods gone or finished, allocate for new ones; returns the allocation."""
        pods = self._live_pods()
        live_keys = {
            (p.metadata.uid, f"{p.metadata.namespace}/{p.metadata.name}", c.name) for p in pods for c in p.spec.containers
        }
        self._held = {key: ids for key, ids in self._held.items() if key in live_keys}
        for pod in pods:
            for container in pod.spec.containers:
                key = (pod.metadata.uid, f"{pod.metadata.namespace}/{pod.metadata.name}", container.name)
                wanted = int(((container.resources and container.resources.limits) or {}).get(GPU, 0))
                if key not in self._held and wanted:
                    self._held[key] = self._allocate(wanted)
        self._publish()
        return dict(self._held)

    def _allocate(self, count: int) -> list[str]:
        taken = {uuid for ids in self._held.values() for uuid in ids}
        free = [uuid for uuid in self.gpu_uuids if uuid not in taken]
        if len(free) < count:  # the scheduler counted the node's capacity: this means a test error
            raise AssertionError(f"{self.node}: {count} GPUs asked, {len(free)} free")
        return free[:count]

    def _publish(self) -> None:
        self.kubelet.release_all()
        for (_, pod, container), ids in self._held.items():
            namespace, name = pod.split("/", 1)
            self.kubelet.hold(namespace, name, container, GPU, *ids)

"""Fake GPU nodes: Node objects that look like GPU feature discovery labelled them.

There is no kubelet, so this module plays the kubelet's API-facing part:

* registers the Node, then patches ``status`` (capacity, allocatable,
  conditions, node info) through the status subresource, as a kubelet does;
* keeps it Ready: a heartbeat thread renews the Ready condition and the node
  Lease in ``kube-node-lease``, so the node-lifecycle controller lifts the
  ``node.kubernetes.io/not-ready`` taint and the real scheduler binds pods;
* confirms deletion of pods bound to its nodes (a kubelet would, after
  stopping the containers), so namespaces holding such pods can finish
  deleting. Pods are never run: they stay bound and Pending.

With ``kwok=True`` the nodes carry kwok's annotation and the kwok controller
(:mod:`kube_testenv.kwok`) runs their pods (Running, Succeeded, deleted) and
confirms deletions; this module then only keeps the nodes Ready.

Label and resource formats follow NVIDIA's device plugin and GFD
(see the project's reference ``gpu-sharing-formats.md``).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self

from kubernetes import client
from kubernetes.client.rest import ApiException

from kube_testenv.kwok import KWOK_NODE_ANNOTATION
from kube_testenv.paths import KUBE_VERSION
from kube_testenv.waiting import wait_for

log = logging.getLogger(__name__)

GPU = "nvidia.com/gpu"
GPU_SHARED = "nvidia.com/gpu.shared"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40

MigStrategy = Literal["none", "single", "mixed"]
SharingStrategy = Literal["none", "time-slicing", "mps"]

_PROFILE = re.compile(r"^(?:(?P<ci>\d+)c\.)?(?P<gi>\d+)g\.(?P<gb>\d+)gb(?P<attr>\+\w+)?$")


def mig_resource_name(profile: str) -> str:
    """``1g.10gb`` -> ``nvidia.com/mig-1g.10gb``; ``+me`` becomes ``.me`` (mixed strategy)."""
    return f"nvidia.com/mig-{profile.replace('+', '.')}"


def _arch_family(major: int, minor: int) -> str:
    families = {
        1: "tesla",
        2: "fermi",
        3: "kepler",
        5: "maxwell",
        6: "pascal",
        9: "hopper",
    }
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    if major == 10:
        return "blackwell"
    return families.get(major, "undefined")


@dataclass(frozen=True)
class GPUNodeSpec:
    """What one fake GPU node offers.

    ``gpus`` counts physical GPUs; with ``mig_strategy="mixed"`` the first
    ``mig_gpus`` of them are in MIG mode and carved into ``mig_devices``
    (profile -> instances on the node), the rest stay whole. With ``"single"``
    every GPU is in MIG mode and the instances are advertised as
    ``nvidia.com/gpu``. ``replicas > 1`` models time-slicing/MPS of the whole
    GPUs, renamed to ``nvidia.com/gpu.shared`` when ``rename_shared``
    (``renameByDefault``).
    """

    name: str
    gpus: int = 8
    product: str = "NVIDIA-H100-80GB-HBM3"
    gpu_memory_mib: int = 81559
    compute_capability: tuple[int, int] = (9, 0)
    mig_capable: bool = True
    mig_strategy: MigStrategy = "none"
    mig_gpus: int = 0
    mig_devices: Mapping[str, int] = field(default_factory=dict)
    sharing: SharingStrategy = "none"
    replicas: int = 1
    rename_shared: bool = False
    cpu: str = "96"
    memory: str = "1024Gi"
    pods: str = "110"
    ephemeral_storage: str = "1Ti"
    labels: Mapping[str, str] = field(default_factory=dict)
    extra_capacity: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for profile in self.mig_devices:
            if not _PROFILE.match(profile):
                raise ValueError(f"not a MIG profile name: {profile!r}")
        if self.mig_devices and self.mig_strategy == "none":
            raise ValueError("mig_devices need mig_strategy 'single' or 'mixed'")
        if self.replicas < 1 or (self.sharing == "none") != (self.replicas == 1):
            raise ValueError("sharing needs replicas >= 2, and replicas > 1 needs sharing")

    @property
    def whole_gpus(self) -> int:
        """GPUs not in MIG mode."""
        if self.mig_strategy == "single":
            return 0
        if self.mig_strategy == "mixed":
            return self.gpus - self.mig_gpus
        return self.gpus

    def capacity(self) -> dict[str, str]:
        """Node capacity as the device plugin would advertise it (allocatable is equal)."""
        capacity = {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": self.pods,
            "ephemeral-storage": self.ephemeral_storage,
        }
        if self.mig_strategy == "single":
            capacity[GPU] = str(sum(self.mig_devices.values()))
        elif self.whole_gpus:
            shared = self.replicas > 1 and self.rename_shared
            capacity[GPU_SHARED if shared else GPU] = str(self.whole_gpus * self.replicas)
        if self.mig_strategy == "mixed":
            for profile, count in self.mig_devices.items():
                capacity[mig_resource_name(profile)] = str(count)
        capacity.update(self.extra_capacity)
        return capacity

    def node_labels(self) -> dict[str, str]:
        """Labels as GPU feature discovery (plus kubelet's well-known ones) set them."""
        major, minor = self.compute_capability
        shared = self.replicas > 1
        product = self.product
        if self.mig_strategy == "single" and self.mig_devices:
            product = f"{self.product}-MIG-{next(iter(self.mig_devices))}"
        if shared and not self.rename_shared:
            product += "-SHARED"
        gpu_count = sum(self.mig_devices.values()) if self.mig_strategy == "single" else self.whole_gpus
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": str(gpu_count),
            "nvidia.com/gpu.replicas": str(self.replicas),
            "nvidia.com/gpu.sharing-strategy": self.sharing if shared else "none",
            "nvidia.com/gpu.memory": str(self.gpu_memory_mib),
            "nvidia.com/gpu.family": _arch_family(major, minor),
            "nvidia.com/gpu.compute.major": str(major),
            "nvidia.com/gpu.compute.minor": str(minor),
            "nvidia.com/gpu.machine": "Fake-GPU-Server",
            "nvidia.com/mig.capable": str(self.mig_capable).lower(),
            "nvidia.com/mig.strategy": self.mig_strategy,
            "nvidia.com/mps.capable": str(self.sharing == "mps" and not self.mig_gpus).lower(),
            "nvidia.com/cuda.driver.major": "580",
            "nvidia.com/cuda.driver.minor": "95",
            "nvidia.com/cuda.driver.rev": "05",
            "nvidia.com/cuda.runtime.major": "13",
            "nvidia.com/cuda.runtime.minor": "0",
        }
        if self.mig_strategy == "mixed":
            for profile, count in self.mig_devices.items():
                labels.update(self._mig_labels(profile, count))
        labels.update(self.labels)
        return labels

    def _mig_labels(self, profile: str, count: int) -> dict[str, str]:
        match = _PROFILE.match(profile)
        assert match is not None  # checked in __post_init__
        prefix = mig_resource_name(profile)
        gi = match["gi"]
        return {
            f"{prefix}.count": str(count),
            f"{prefix}.product": f"{self.product}-MIG-{profile}",
            f"{prefix}.replicas": "1",
            f"{prefix}.sharing-strategy": "none",
            # GFD reports the instance's exact MiB; the nominal size is close enough here.
            f"{prefix}.memory": str(int(match["gb"]) * 1024),
            f"{prefix}.slices.gi": gi,
            f"{prefix}.slices.ci": match["ci"] or gi,
        }


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _time(moment: dt.datetime) -> str:
    """metav1.Time: RFC 3339, seconds."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_time(moment: dt.datetime) -> str:
    """metav1.MicroTime: RFC 3339, microseconds."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _conditions(now: dt.datetime) -> list[dict[str, str]]:
    heartbeat = _time(now)
    fine = [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID"),
        ("Ready", "True", "KubeletReady"),
    ]
    return [
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": "fake GPU node (gpuportal test environment)",
            "lastHeartbeatTime": heartbeat,
        }
        for kind, status, reason in fine
    ]


def _initial_status(spec: GPUNodeSpec, now: dt.datetime) -> dict[str, Any]:
    capacity = spec.capacity()
    conditions = _conditions(now)
    for condition in conditions:
        condition["lastTransitionTime"] = _time(now)
    return {
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": conditions,
            "addresses": [{"type": "Hostname", "address": spec.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": spec.name,
                "systemUUID": spec.name,
                "bootID": spec.name,
                "kernelVersion": "6.8.0-fake",
                "osImage": "gpuportal fake node",
                "containerRuntimeVersion": "fake://0",
                "kubeletVersion": KUBE_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
    }


class FakeGPUNodes:
    """A set of fake GPU nodes kept alive by one heartbeat thread.

    Use as a context manager (or call :meth:`close`): leaving deletes the
    nodes, their leases and any pods still bound to them.
    """

    def __init__(
        self,
        api_factory: Callable[[], client.ApiClient],
        *,
        heartbeat_interval: float = 10.0,
        reap_interval: float = 0.5,
        ready_timeout: float = 30.0,
        kwok: bool = False,
    ) -> None:
        self._api_factory = api_factory
        self.kwok = kwok
        self._api = api_factory()
        self._heartbeat_interval = heartbeat_interval
        self._reap_interval = reap_interval
        self._ready_timeout = ready_timeout
        self._nodes: dict[str, GPUNodeSpec] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.heartbeats = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def names(self) -> list[str]:
        with self._lock:
            return list(self._nodes)

    def add(self, spec: GPUNodeSpec, *, wait_schedulable: bool = True) -> Any:
        """Register *spec* as a Ready node; by default wait until pods can land on it.

        Returns the V1Node as last read.
        """
        core = client.CoreV1Api(self._api)
        now = _now()
        annotations = dict([KWOK_NODE_ANNOTATION]) if self.kwok else None
        body = client.V1Node(
            metadata=client.V1ObjectMeta(name=spec.name, labels=spec.node_labels(), annotations=annotations),
        )
        node = core.create_node(body)
        core.patch_node_status(spec.name, _initial_status(spec, now))
        self._create_lease(spec.name, node.metadata.uid, now)
        with self._lock:
            self._nodes[spec.name] = spec
        self._ensure_thread()
        if wait_schedulable:
            return self.wait_schedulable(spec.name)
        return core.read_node(spec.name)

    def wait_schedulable(self, name: str) -> Any:
        """Wait until the node-lifecycle controller lifted the not-ready taint."""
        core = client.CoreV1Api(self._api)

        def probe() -> Any:
            node = core.read_node(name)
            taints = node.spec.taints or []
            return None if any(t.key == NOT_READY_TAINT for t in taints) else node

        return wait_for(
            probe,
            timeout=self._ready_timeout,
            interval=0.2,
            what=f"node {name} to lose the {NOT_READY_TAINT} taint (is node-lifecycle-controller running?)",
        )

    def remove(self, name: str) -> None:
        """Delete node *name*, its lease and the pods bound to it."""
        with self._lock:
            self._nodes.pop(name, None)
        self._force_delete_pods(name, only_terminating=False)
        try:
            client.CoreV1Api(self._api).delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
        # The lease's owner reference lets the garbage collector remove it too,
        # but only if that controller runs; delete it explicitly.
        try:
            client.CoordinationV1Api(self._api).delete_namespaced_lease(name, NODE_LEASE_NAMESPACE)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        for name in self.names:
            try:
                self.remove(name)
            except Exception:  # best effort; the cluster may be gone
                log.warning("could not remove fake node %s", name, exc_info=True)
        self._api.close()

    # ------------------------------------------------------------ kubelet part
    def _create_lease(self, name: str, node_uid: str, now: dt.datetime) -> None:
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": NODE_LEASE_NAMESPACE,
                # As the kubelet does: the lease goes when the node goes.
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}],
            },
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                "renewTime": _micro_time(now),
            },
        }
        client.CoordinationV1Api(self._api).create_namespaced_lease(NODE_LEASE_NAMESPACE, lease)

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fake-gpu-node-heartbeat", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        api = self._api_factory()
        try:
            next_beat = time.monotonic() + self._heartbeat_interval
            while not self._stop.wait(self._reap_interval):
                beat = time.monotonic() >= next_beat
                if beat:
                    next_beat = time.monotonic() + self._heartbeat_interval
                for name in self.names:
                    try:
                        if not self.kwok:  # kwok's pod-delete stage confirms deletions on its nodes
                            self._force_delete_pods(name, only_terminating=True, api=api)
                        if beat:
                            self._heartbeat(name, api)
                    except Exception:  # keep beating for the others
                        log.warning("fake node %s: heartbeat failed", name, exc_info=True)
        finally:
            api.close()

    def _heartbeat(self, name: str, api: client.ApiClient) -> None:
        now = _now()
        client.CoreV1Api(api).patch_node_status(name, {"status": {"conditions": _conditions(now)}})
        client.CoordinationV1Api(api).patch_namespaced_lease(
            name, NODE_LEASE_NAMESPACE, {"spec": {"renewTime": _micro_time(now)}}
        )
        self.heartbeats += 1

    def _force_delete_pods(self, node: str, *, only_terminating: bool, api: client.ApiClient | None = None) -> None:
        """Delete bound pods with grace period 0, as a kubelet does once containers stop."""
        core = client.CoreV1Api(api or self._api)
        pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        for pod in pods:
            if only_terminating and pod.metadata.deletion_timestamp is None:
                continue
            try:
                core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
            except ApiException as exc:
                if exc.status != 404:
                    raise

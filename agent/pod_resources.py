"""Which devices each container holds, read from the kubelet's PodResources API (v1 ``List``).

The kubelet serves the API over a unix socket (``/var/lib/kubelet/pod-resources/kubelet.sock``); each
collection calls ``List`` once, on a fresh channel, with a deadline. Every failure (socket missing,
refused, a gRPC status, the deadline) becomes ``pod_resources_error`` in the report and no
``pod_devices`` at all: a partial or stale list would read as "nothing held" to the portal.

The answer names pods by namespace and name only. ``pod_uid`` is filled from the NVML processes,
whose cgroups name their pod's UID, only where that is unambiguous: the device (GPU, MIG device, or
the GPU behind a replica) is held by that one pod alone and every process on it carries one UID.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agent.report import AgentReport, GpuReport, PodDevice, PodDeviceSharing

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
MAX_POD_DEVICES = 4096  # report_schema.json's maxItems
MAX_ERROR = 512
GPU = "nvidia.com/gpu"
GPU_SHARED = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
REPLICA_SEPARATOR = "::"
_LIMITS = {"namespace": 63, "pod": 253, "container": 253, "resource": 253, "device_id": 128}

ReplicaSharing = Literal["time-sliced", "mps"]


class PodResourcesUnavailable(Exception):
    """The kubelet could not be asked, or did not answer usefully; the message says why."""


@dataclass(frozen=True)
class PodResourcesSettings:
    """Where the socket is and how to name what it lists.

    ``socket`` None means the kubelet's default path, read only when it exists. The device plugin
    names time-slicing and MPS replicas alike (``<GPU UUID>::<n>``), so which one a node runs is
    configuration (``replica_sharing``); HAMi's device plugin registers ordinary resource names, so
    the names it serves on this node are listed in ``hami_resources``.
    """

    socket: Path | None = None
    timeout_seconds: float = 5.0
    replica_sharing: ReplicaSharing = "time-sliced"
    hami_resources: frozenset[str] = field(default_factory=frozenset)

    def socket_to_read(self) -> Path | None:
        if self.socket is not None:
            return self.socket
        return DEFAULT_SOCKET if DEFAULT_SOCKET.exists() else None


def list_pod_resources(socket: Path, timeout_seconds: float) -> Any:
    """One ``List`` call on a new channel; raises :class:`PodResourcesUnavailable`."""
    import grpc

    from agent.podresources import api_pb2, api_pb2_grpc

    if not socket.exists():
        raise PodResourcesUnavailable(f"PodResources socket {socket} does not exist")
    with grpc.insecure_channel(f"unix://{socket.resolve()}") as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        try:
            return stub.List(api_pb2.ListPodResourcesRequest(), timeout=timeout_seconds)
        except grpc.RpcError as exc:
            code = exc.code()
            if code is grpc.StatusCode.DEADLINE_EXCEEDED:
                raise PodResourcesUnavailable(f"PodResources List timed out after {timeout_seconds:g}s") from exc
            name = code.name if code is not None else "UNKNOWN"
            raise PodResourcesUnavailable(f"PodResources List failed: {name}: {exc.details()}") from exc


def sharing_of(resource: str, device_id: str, settings: PodResourcesSettings) -> PodDeviceSharing | None:
    """How a listed device is held; None for a resource that is not a GPU (NICs, hugepages, ...)."""
    if resource in settings.hami_resources:
        return "hami"
    if resource.startswith(MIG_PREFIX) or (resource == GPU and device_id.startswith("MIG-")):
        return "mig"
    if resource not in (GPU, GPU_SHARED):
        return None
    if REPLICA_SEPARATOR in device_id:
        return settings.replica_sharing
    return "exclusive"


def pod_devices_from(response: Any, settings: PodResourcesSettings) -> list[PodDevice]:
    """The GPU devices in a ``ListPodResourcesResponse``, in the kubelet's order, without UIDs."""
    devices: list[PodDevice] = []
    for pod in response.pod_resources:
        for container in pod.containers:
            for held in container.devices:
                for device_id in held.device_ids:
                    sharing = sharing_of(held.resource_name, device_id, settings)
                    if sharing is None:
                        continue
                    device: PodDevice = {
                        "namespace": pod.namespace,
                        "pod": pod.name,
                        "pod_uid": None,
                        "container": container.name,
                        "resource": held.resource_name,
                        "device_id": device_id,
                        "sharing": sharing,
                    }
                    _check_lengths(device)
                    devices.append(device)
    if len(devices) > MAX_POD_DEVICES:
        raise PodResourcesUnavailable(f"PodResources listed {len(devices)} GPU devices, more than {MAX_POD_DEVICES}")
    return devices


def _check_lengths(device: PodDevice) -> None:
    for key, limit in _LIMITS.items():
        value = str(device[key])  # type: ignore[literal-required]
        if not 1 <= len(value) <= limit:
            raise PodResourcesUnavailable(f"PodResources listed a {key} of {len(value)} characters: {value[:80]!r}")


def physical_device(device: PodDevice) -> str:
    """The GPU or MIG device behind a listed device: a replica ``<uuid>::<n>`` is its GPU."""
    return device["device_id"].split(REPLICA_SEPARATOR, 1)[0]


def process_pod_uids(gpus: Iterable[GpuReport]) -> dict[str, set[str]]:
    """GPU or MIG device UUID -> the pod UIDs of the processes NVML saw on it."""
    uids: dict[str, set[str]] = defaultdict(set)
    for gpu in gpus:
        for process in gpu["processes"] or []:
            key = process["mig_uuid"] or gpu["uuid"]
            if key is not None and process["pod_uid"] is not None:
                uids[key].add(process["pod_uid"])
    return uids


def join_pod_uids(devices: list[PodDevice], uids_by_device: dict[str, set[str]]) -> None:
    """Set ``pod_uid`` where exactly one UID follows from devices held by that pod alone."""
    holders: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for device in devices:
        holders[physical_device(device)].add((device["namespace"], device["pod"]))
    candidates: dict[tuple[str, str], set[str]] = defaultdict(set)
    for key, pods in holders.items():
        if len(pods) == 1:
            candidates[next(iter(pods))] |= uids_by_device.get(key, set())
    claimed: dict[str, int] = defaultdict(int)
    for found in candidates.values():
        for uid in found:
            claimed[uid] += 1
    for device in devices:
        found = candidates.get((device["namespace"], device["pod"]), set())
        if len(found) == 1 and claimed[next(iter(found))] == 1:
            device["pod_uid"] = next(iter(found))


def add_pod_devices(report: AgentReport, settings: PodResourcesSettings) -> None:
    """Put ``pod_devices`` (or ``pod_resources_error``) into *report*; nothing when no socket applies."""
    socket = settings.socket_to_read()
    if socket is None:
        return
    try:
        devices = pod_devices_from(list_pod_resources(socket, settings.timeout_seconds), settings)
    except PodResourcesUnavailable as exc:
        report["pod_resources_error"] = str(exc)[:MAX_ERROR]
        return
    except Exception as exc:  # never let custody cost the NVML report
        report["pod_resources_error"] = f"PodResources List failed: {type(exc).__name__}: {exc}"[:MAX_ERROR]
        return
    join_pod_uids(devices, process_pod_uids(report["gpus"]))
    report["pod_devices"] = devices
    report["pod_resources_error"] = None

"""A fake kubelet: a real gRPC server for the real PodResources v1 proto on a unix socket.

The test says what each container holds (:meth:`FakeKubelet.hold`), makes the next calls fail with
a gRPC status or stall past the client's deadline, and stops or restarts the server; the agent talks
to it exactly as to a kubelet (``agent/podresources``' generated stubs, the same socket protocol).
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import grpc

from agent.podresources import api_pb2, api_pb2_grpc


@dataclass
class HeldDevices:
    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: list[str]


@dataclass
class KubeletState:
    held: list[HeldDevices] = field(default_factory=list)
    allocatable: dict[str, list[str]] = field(default_factory=dict)
    failure: tuple[grpc.StatusCode, str] | None = None
    stall_seconds: float = 0.0
    list_calls: int = 0


class _Servicer(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    def __init__(self, state: KubeletState, lock: threading.Lock) -> None:
        self._state = state
        self._lock = lock

    def List(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 (the proto's name)
        with self._lock:
            self._state.list_calls += 1
            failure, stall = self._state.failure, self._state.stall_seconds
            pods = _pods(self._state.held)
        if stall:
            time.sleep(stall)
        if failure is not None:
            context.abort(*failure)
        return api_pb2.ListPodResourcesResponse(pod_resources=pods)

    def GetAllocatableResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        with self._lock:
            devices = [
                api_pb2.ContainerDevices(resource_name=name, device_ids=ids)
                for name, ids in self._state.allocatable.items()
            ]
        return api_pb2.AllocatableResourcesResponse(devices=devices)


def _pods(held: list[HeldDevices]) -> list[Any]:
    """Group the held devices into PodResources messages, pods and containers in first-seen order."""
    pods: dict[tuple[str, str], dict[str, list[Any]]] = {}
    for item in held:
        containers = pods.setdefault((item.namespace, item.pod), {})
        containers.setdefault(item.container, []).append(
            api_pb2.ContainerDevices(resource_name=item.resource, device_ids=item.device_ids)
        )
    return [
        api_pb2.PodResources(
            namespace=namespace,
            name=name,
            containers=[
                api_pb2.ContainerResources(name=container, devices=devices) for container, devices in containers.items()
            ],
        )
        for (namespace, name), containers in pods.items()
    ]


class FakeKubelet:
    """Serves PodResources on ``socket`` until :meth:`stop`; a context manager."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.state = KubeletState()
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> Self:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Servicer(self.state, self._lock), server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        """Stop serving and remove the socket, as a kubelet that exits does."""
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None
        self.socket.unlink(missing_ok=True)

    def restart(self) -> None:
        self.stop()
        self.start()

    def hold(self, namespace: str, pod: str, container: str, resource: str, *device_ids: str) -> None:
        with self._lock:
            self.state.held.append(HeldDevices(namespace, pod, container, resource, list(device_ids)))

    def release_all(self) -> None:
        with self._lock:
            self.state.held.clear()

    def fail_with(self, code: grpc.StatusCode | None, details: str = "") -> None:
        with self._lock:
            self.state.failure = None if code is None else (code, details)

    def stall(self, seconds: float) -> None:
        with self._lock:
            self.state.stall_seconds = seconds

"""The kwok controller: runs the pods the real scheduler binds to the fake GPU nodes.

kwok (sigs.k8s.io/kwok, built by ``make kube-testenv``) watches the nodes carrying the annotation
``kwok.x-k8s.io/node=fake`` and plays its stages on the pods bound to them, writing real status
transitions through the API server: Running at once, Succeeded after the pod's
``kube-testenv.gpuportal.io/run-for`` duration, deleted after ``kube-testenv.gpuportal.io/remove-after``
(see ``kwok-stages.yaml`` beside this module, and :func:`kube_testenv.workloads.gpu_pod`).

Only pod stages are configured and node leases are off (``--node-lease-duration-seconds=0``): the
nodes' heartbeat and lease stay with :class:`kube_testenv.gpu_nodes.FakeGPUNodes`, which also stops
confirming pod deletions itself on kwok-managed nodes.
"""

from __future__ import annotations

import http.client
import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Self

from kube_testenv.paths import KEEP_ENV, env_flag, find_kwok
from kube_testenv.process import ManagedProcess, free_ports
from kube_testenv.readiness import ClusterStartError
from kube_testenv.waiting import WaitTimeout, wait_for

#: Nodes with this annotation are kwok's (``--manage-nodes-with-annotation-selector``).
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
#: How long a pod runs before kwok completes it (a Go duration such as ``"3s"``).
RUN_FOR_ANNOTATION = "kube-testenv.gpuportal.io/run-for"
#: How long after finishing kwok deletes the pod.
REMOVE_AFTER_ANNOTATION = "kube-testenv.gpuportal.io/remove-after"
STAGES_FILE = Path(__file__).with_name("kwok-stages.yaml")


class KwokController:
    """One kwok controller process against a cluster's admin kubeconfig; a context manager."""

    def __init__(self, kubeconfig: Path, *, binary: Path | None = None, start_timeout: float = 30.0) -> None:
        self.binary = binary if binary is not None else find_kwok()
        self.kubeconfig = kubeconfig
        self.start_timeout = start_timeout
        self._dir: Path | None = None
        self._process: ManagedProcess | None = None
        self.port = 0

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def log_path(self) -> Path | None:
        return self._process.log_path if self._process is not None else None

    def start(self) -> Self:
        """Start kwok and wait until its /healthz answers."""
        self._dir = Path(tempfile.mkdtemp(prefix="gpuportal-kwok-"))
        (self.port,) = free_ports(1)
        annotation = "=".join(KWOK_NODE_ANNOTATION)
        argv = [
            str(self.binary),
            f"--config={STAGES_FILE}",
            f"--kubeconfig={self.kubeconfig}",
            f"--manage-nodes-with-annotation-selector={annotation}",
            "--node-lease-duration-seconds=0",
            f"--server-address=127.0.0.1:{self.port}",
            "--cidr=10.244.0.1/16",
        ]
        # HOME points into our directory so that a ~/.kwok/kwok.yaml of the machine is never read.
        self._process = ManagedProcess("kwok", ["env", f"HOME={self._dir}", *argv], self._dir)
        self._process.start()
        try:
            wait_for(self._healthy, timeout=self.start_timeout, interval=0.1, what=f"kwok /healthz on {self.port}",
                     fatal=(ClusterStartError,))
        except (WaitTimeout, ClusterStartError) as exc:
            tail = self._process.log_tail()
            self.stop()
            raise ClusterStartError(f"kwok did not start: {exc}\n{tail}") from exc
        return self

    def _healthy(self) -> bool:
        assert self._process is not None
        code = self._process.exit_code()
        if code is not None:
            raise ClusterStartError(f"kwok exited with status {code}")
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            connection.request("GET", "/healthz")
            return connection.getresponse().status == 200
        except OSError:
            return False
        finally:
            connection.close()

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None
        if self._dir is not None and not env_flag(KEEP_ENV):
            shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = None

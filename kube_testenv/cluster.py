"""Launch a real etcd + kube-apiserver + controller-manager + scheduler on loopback.

Everything (PKI, etcd data, logs, kubeconfigs) lives in one fresh temporary
directory that :meth:`KubeTestCluster.stop` removes; ``stop`` runs from the
context manager, from ``atexit`` and, for a SIGKILLed parent, the children die
through PR_SET_PDEATHSIG (see :mod:`kube_testenv.process`).

The options and each component's flags are in :mod:`kube_testenv.launch`, the data
directory and its PKI in :mod:`kube_testenv.datadir`, the health checks in
:mod:`kube_testenv.readiness`.
"""

from __future__ import annotations

import atexit
import itertools
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from kubernetes import client

from kube_testenv import kubeapi
from kube_testenv.certs import CertificateAuthority, KeyPair
from kube_testenv.datadir import ClusterFiles, write_pki
from kube_testenv.kubeconfig import write_kubeconfig
from kube_testenv.launch import (
    ClusterOptions,
    apiserver_args,
    controller_manager_args,
    etcd_args,
    scheduler_args,
)
from kube_testenv.paths import KEEP_ENV, KubeBinaries, env_flag, find_binaries
from kube_testenv.process import ManagedProcess, free_ports
from kube_testenv.readiness import ClusterStartError, HealthEndpoint, wait_healthy
from kube_testenv.waiting import WaitTimeout


class KubeTestCluster:
    """A throw-away control plane; use as a context manager or call start/stop.

    >>> with KubeTestCluster() as cluster:            # doctest: +SKIP
    ...     with cluster.api_client() as api:
    ...         client.CoreV1Api(api).list_namespace()
    """

    def __init__(
        self,
        binaries: KubeBinaries | None = None,
        options: ClusterOptions | None = None,
        *,
        keep_data: bool | None = None,
    ) -> None:
        self.binaries = binaries if binaries is not None else find_binaries()
        self.options = options if options is not None else ClusterOptions()
        self.keep_data = env_flag(KEEP_ENV) if keep_data is None else keep_data
        self._files: ClusterFiles | None = None
        self._ca: CertificateAuthority | None = None
        self._processes: list[ManagedProcess] = []
        self._server = ""
        self._user_serial = itertools.count(1)
        self.startup_seconds: float | None = None
        #: Seconds from the start of the last attempt to each start-up milestone.
        self.timings: dict[str, float] = {}

    # ----------------------------------------------------------------- facts
    @property
    def server(self) -> str:
        """``https://127.0.0.1:<port>`` of the API server."""
        self._require_started()
        return self._server

    @property
    def kubeconfig(self) -> Path:
        """An admin (system:masters) kubeconfig with embedded credentials."""
        return self._require_started().admin_kubeconfig

    @property
    def ca_file(self) -> Path:
        return self._require_started().ca

    @property
    def data_dir(self) -> Path:
        return self._require_started().root

    @property
    def log_dir(self) -> Path:
        return self._require_started().logs

    @property
    def pids(self) -> list[int]:
        """Process ids of the running components (etcd first)."""
        return [p.pid for p in self._processes if p.pid is not None]

    def _require_started(self) -> ClusterFiles:
        if self._files is None or not self._server:
            raise RuntimeError("cluster is not started")
        return self._files

    # ------------------------------------------------------------- lifecycle
    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> Self:
        """Start all components and wait until they are healthy; returns self."""
        if self._processes:
            raise RuntimeError("cluster already started")
        began = time.monotonic()
        for attempt in range(1, self.options.attempts + 1):
            atexit.register(self.stop)
            try:
                self._start_once()
            except (ClusterStartError, WaitTimeout) as exc:
                port_race = "address already in use" in str(exc)
                self.stop()
                if not port_race or attempt == self.options.attempts:
                    raise
                continue
            except BaseException:
                self.stop()
                raise
            self.startup_seconds = time.monotonic() - began
            return self
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Stop every component (dependents first) and remove the data directory."""
        atexit.unregister(self.stop)
        # Controllers and scheduler first, then the API server, etcd last.
        for group in (
            [p for p in self._processes if p.name in {"kube-scheduler", "kube-controller-manager"}],
            [p for p in self._processes if p.name == "kube-apiserver"],
            [p for p in self._processes if p.name == "etcd"],
        ):
            for process in group:
                process.terminate()
            for process in group:
                process.wait_or_kill(timeout=10.0)
        self._processes = []
        self._server = ""
        if self._files is not None and not self.keep_data:
            shutil.rmtree(self._files.root, ignore_errors=True)
        self._files = None

    # --------------------------------------------------------------- clients
    def api_client(self) -> client.ApiClient:
        """A new admin ApiClient (close it, or use it as a context manager)."""
        files = self._require_started()
        return self._client(files.admin_cert, files.admin_key)

    def user_credentials(self, user: str, groups: Sequence[str] = ()) -> tuple[Path, Path]:
        """Issue a client certificate for *user* in *groups*; returns (cert, key) paths.

        The API server maps CN to the user name and O to groups, so this is how
        a test acts as a non-admin user (remember ``system:authenticated`` is
        added by the server; never pass ``system:masters`` unless you mean it).
        """
        files = self._require_started()
        assert self._ca is not None
        pair = self._ca.issue(user, organizations=groups)
        stem = f"user-{next(self._user_serial)}"
        return pair.write(files.pki, stem)

    def user_api_client(self, user: str, groups: Sequence[str] = ()) -> client.ApiClient:
        """A new ApiClient authenticated as *user* (client certificate)."""
        cert, key = self.user_credentials(user, groups)
        return self._client(cert, key)

    def user_kubeconfig(self, user: str, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig file authenticating as *user*."""
        files = self._require_started()
        cert, key = self.user_credentials(user, groups)
        pair = KeyPair(cert.read_bytes(), key.read_bytes())
        path = files.root / f"{cert.stem}.kubeconfig"
        return write_kubeconfig(path, self._server, files.ca.read_bytes(), pair, user)

    def _client(self, cert: Path, key: Path) -> client.ApiClient:
        configuration = client.Configuration()
        configuration.host = self._server
        configuration.ssl_ca_cert = str(self.ca_file)
        configuration.cert_file = str(cert)
        configuration.key_file = str(key)
        configuration.verify_ssl = True
        return client.ApiClient(configuration)

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl against this cluster as admin."""
        argv = [str(self.binaries.kubectl), f"--kubeconfig={self.kubeconfig}", *args]
        return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=120)

    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> Any:
        """Create a namespace and wait until its ``default`` service account exists."""
        with self.api_client() as api:
            return kubeapi.create_namespace(api, name, labels)

    def delete_namespace(self, name: str) -> None:
        """Delete a namespace (already gone is fine)."""
        from kubernetes.client.rest import ApiException

        with self.api_client() as api:
            try:
                client.CoreV1Api(api).delete_namespace(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise

    # ------------------------------------------------------------ internals
    def _start_once(self) -> None:
        began = time.monotonic()
        timeout = self.options.start_timeout
        self.timings = {}
        root = Path(tempfile.mkdtemp(prefix="gpuportal-kube-"))
        files = ClusterFiles(root)
        self._files = files
        for directory in (files.pki, files.logs, files.etcd_data):
            directory.mkdir(mode=0o700)
        etcd_port, peer_port, api_port, kcm_port, sched_port = free_ports(5)
        self._server = f"https://127.0.0.1:{api_port}"
        self._ca = write_pki(files, self._server)

        etcd = self._spawn("etcd", etcd_args(files, etcd_port, peer_port))
        apiserver = self._spawn("kube-apiserver", apiserver_args(files, api_port, etcd_port, self.options))
        wait_healthy(apiserver, HealthEndpoint(api_port, "/readyz", client_cert=True), files=files, timeout=timeout,
                     also=[etcd])
        self.timings["apiserver_ready"] = time.monotonic() - began

        waiting: list[tuple[ManagedProcess, int]] = []
        if self.options.controller_manager:
            kcm = self._spawn("kube-controller-manager", controller_manager_args(files, kcm_port, self.options))
            waiting.append((kcm, kcm_port))
        if self.options.scheduler:
            sched = self._spawn("kube-scheduler", scheduler_args(files, sched_port, self.options))
            waiting.append((sched, sched_port))
        for process, port in waiting:
            wait_healthy(process, HealthEndpoint(port, "/healthz", client_cert=False), files=files, timeout=timeout)
        self.timings["components_healthy"] = time.monotonic() - began
        if self.options.controller_manager and "serviceaccount-controller" in self.options.controllers:
            # Proof the controller-manager is working, and what most tests need first.
            with self.api_client() as api:
                kubeapi.wait_for_default_service_account(api, "default", timeout=timeout)
            self.timings["default_service_account"] = time.monotonic() - began

    def _spawn(self, name: str, args: list[str]) -> ManagedProcess:
        files = self._require_files()
        process = ManagedProcess(name, [str(self.binaries.path(name)), *args], files.logs)
        self._processes.append(process)
        process.start()
        return process

    def _require_files(self) -> ClusterFiles:
        if self._files is None:
            raise RuntimeError("cluster has no data directory")
        return self._files

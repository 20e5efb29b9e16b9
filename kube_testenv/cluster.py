"""Launch a real etcd + kube-apiserver + controller-manager + scheduler on loopback.

Everything (PKI, etcd data, logs, kubeconfigs) lives in one fresh temporary
directory that :meth:`KubeTestCluster.stop` removes; ``stop`` runs from the
context manager, from ``atexit`` and, for a SIGKILLed parent, the children die
through PR_SET_PDEATHSIG (see :mod:`kube_testenv.process`).
"""

from __future__ import annotations

import atexit
import http.client
import itertools
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from kubernetes import client

from kube_testenv import kubeapi
from kube_testenv.certs import CertificateAuthority, KeyPair, service_account_key
from kube_testenv.kubeconfig import write_kubeconfig
from kube_testenv.paths import KEEP_ENV, KubeBinaries, env_flag, find_binaries
from kube_testenv.process import ManagedProcess, free_ports
from kube_testenv.waiting import WaitTimeout, wait_for

#: Controllers the tests rely on: quota status, namespace deletion, service
#: accounts and their tokens, aggregated roles (``view``/``edit``/``admin`` get
#: their rules from clusterrole-aggregation), kube-root-ca.crt, and node
#: lifecycle (lifts the not-ready taint once a node reports Ready).
DEFAULT_CONTROLLERS: tuple[str, ...] = (
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "resourcequota-controller",
    "clusterrole-aggregation-controller",
    "root-ca-certificate-publisher-controller",
    "node-lifecycle-controller",
)

ADMISSION_PLUGINS = "NamespaceLifecycle,LimitRanger,ServiceAccount,Priority,ResourceQuota"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
_SERVICE_IP = "10.0.0.1"  # first address of the range: the kubernetes Service


class ClusterStartError(RuntimeError):
    """A component exited or did not become healthy; the message has its log tail."""


@dataclass(frozen=True)
class ClusterOptions:
    """Knobs for :class:`KubeTestCluster`; the defaults suit the test suite."""

    controllers: Sequence[str] = DEFAULT_CONTROLLERS
    controller_manager: bool = True
    scheduler: bool = True
    #: ResourceQuota controller full resync; events trigger syncs anyway.
    resource_quota_sync_period: str = "15s"
    start_timeout: float = 60.0
    verbosity: int = 1
    extra_apiserver_args: Sequence[str] = ()
    extra_controller_manager_args: Sequence[str] = ()
    extra_scheduler_args: Sequence[str] = ()
    #: Start attempts; a retry covers losing a just-picked free port to a race.
    attempts: int = 3


@dataclass
class _Files:
    """Paths inside the data directory, filled in by ``_write_pki``."""

    root: Path
    ca: Path = field(init=False)
    serving_cert: Path = field(init=False)
    serving_key: Path = field(init=False)
    sa_public: Path = field(init=False)
    sa_private: Path = field(init=False)
    admin_cert: Path = field(init=False)
    admin_key: Path = field(init=False)
    admin_kubeconfig: Path = field(init=False)
    controller_manager_kubeconfig: Path = field(init=False)
    scheduler_kubeconfig: Path = field(init=False)

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"


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
        self._files: _Files | None = None
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

    def _require_started(self) -> _Files:
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

    # ------------------------------------------------------------ internals
    def _start_once(self) -> None:
        began = time.monotonic()
        self.timings = {}
        root = Path(tempfile.mkdtemp(prefix="gpuportal-kube-"))
        files = _Files(root)
        self._files = files
        for directory in (files.pki, files.logs, files.etcd_data):
            directory.mkdir(mode=0o700)
        etcd_port, peer_port, api_port, kcm_port, sched_port = free_ports(5)
        self._server = f"https://127.0.0.1:{api_port}"
        self._write_pki(files)

        etcd = self._spawn("etcd", self._etcd_args(files, etcd_port, peer_port))
        apiserver = self._spawn("kube-apiserver", self._apiserver_args(files, api_port, etcd_port))
        self._wait_healthy(apiserver, api_port, "/readyz", client_cert=True, also=[etcd])
        self.timings["apiserver_ready"] = time.monotonic() - began

        waiting: list[tuple[ManagedProcess, int]] = []
        if self.options.controller_manager:
            kcm = self._spawn("kube-controller-manager", self._kcm_args(files, kcm_port))
            waiting.append((kcm, kcm_port))
        if self.options.scheduler:
            sched = self._spawn("kube-scheduler", self._scheduler_args(files, sched_port))
            waiting.append((sched, sched_port))
        for process, port in waiting:
            self._wait_healthy(process, port, "/healthz", client_cert=False)
        self.timings["components_healthy"] = time.monotonic() - began
        if self.options.controller_manager and "serviceaccount-controller" in self.options.controllers:
            # Proof the controller-manager is working, and what most tests need first.
            with self.api_client() as api:
                kubeapi.wait_for_default_service_account(api, "default", timeout=self.options.start_timeout)
            self.timings["default_service_account"] = time.monotonic() - began

    def _write_pki(self, files: _Files) -> None:
        ca = CertificateAuthority()
        self._ca = ca
        pki = files.pki
        files.ca = pki / "ca.crt"
        files.ca.write_bytes(ca.cert_pem)
        serving = ca.issue(
            "kube-apiserver",
            dns_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ip_addresses=["127.0.0.1", _SERVICE_IP],
            server=True,
            client=False,
        )
        files.serving_cert, files.serving_key = serving.write(pki, "serving")
        files.sa_public, files.sa_private = service_account_key().write(pki, "service-account")
        # .crt holds the public key here; name it for what it is.
        files.sa_public = files.sa_public.rename(pki / "service-account.pub")

        admin = ca.issue("gpuportal-admin", organizations=["system:masters"])
        files.admin_cert, files.admin_key = admin.write(pki, "admin")
        files.admin_kubeconfig = write_kubeconfig(
            files.root / "admin.kubeconfig",
            self._server,
            ca.cert_pem,
            admin,
            "gpuportal-admin",
        )
        # The controller-manager runs without --use-service-account-credentials,
        # so its own identity needs every controller's rights: system:masters.
        kcm = ca.issue("system:kube-controller-manager", organizations=["system:masters"])
        files.controller_manager_kubeconfig = write_kubeconfig(
            files.root / "controller-manager.kubeconfig",
            self._server,
            ca.cert_pem,
            kcm,
            "system:kube-controller-manager",
        )
        # The scheduler's bootstrap ClusterRoleBinding covers this identity.
        scheduler = ca.issue("system:kube-scheduler")
        files.scheduler_kubeconfig = write_kubeconfig(
            files.root / "scheduler.kubeconfig",
            self._server,
            ca.cert_pem,
            scheduler,
            "system:kube-scheduler",
        )

    def _spawn(self, name: str, args: list[str]) -> ManagedProcess:
        files = self._require_files()
        process = ManagedProcess(name, [str(self.binaries.path(name)), *args], files.logs)
        self._processes.append(process)
        process.start()
        return process

    def _require_files(self) -> _Files:
        if self._files is None:
            raise RuntimeError("cluster has no data directory")
        return self._files

    def _etcd_args(self, files: _Files, port: int, peer_port: int) -> list[str]:
        client_url = f"http://127.0.0.1:{port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        return [
            "--name=default",
            f"--data-dir={files.etcd_data}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=default={peer_url}",
            "--initial-cluster-state=new",
            # Test data is disposable; fsync dominates etcd latency otherwise.
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]

    def _apiserver_args(self, files: _Files, port: int, etcd_port: int) -> list[str]:
        return [
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={files.pki}",
            f"--tls-cert-file={files.serving_cert}",
            f"--tls-private-key-file={files.serving_key}",
            f"--client-ca-file={files.ca}",
            f"--service-account-issuer=https://127.0.0.1:{port}",
            f"--service-account-key-file={files.sa_public}",
            f"--service-account-signing-key-file={files.sa_private}",
            "--authorization-mode=Node,RBAC",
            f"--enable-admission-plugins={ADMISSION_PLUGINS}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--allow-privileged=true",
            # Endpoints may not hold loopback addresses; nothing routes to us anyway.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            f"--v={self.options.verbosity}",
            *self.options.extra_apiserver_args,
        ]

    def _kcm_args(self, files: _Files, port: int) -> list[str]:
        return [
            f"--kubeconfig={files.controller_manager_kubeconfig}",
            "--leader-elect=false",
            f"--controllers={','.join(self.options.controllers)}",
            f"--root-ca-file={files.ca}",
            f"--service-account-private-key-file={files.sa_private}",
            f"--resource-quota-sync-period={self.options.resource_quota_sync_period}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--tls-cert-file={files.serving_cert}",
            f"--tls-private-key-file={files.serving_key}",
            "--profiling=false",
            f"--v={self.options.verbosity}",
            *self.options.extra_controller_manager_args,
        ]

    def _scheduler_args(self, files: _Files, port: int) -> list[str]:
        return [
            f"--kubeconfig={files.scheduler_kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--tls-cert-file={files.serving_cert}",
            f"--tls-private-key-file={files.serving_key}",
            "--profiling=false",
            f"--v={self.options.verbosity}",
            *self.options.extra_scheduler_args,
        ]

    def _wait_healthy(
        self,
        process: ManagedProcess,
        port: int,
        path: str,
        *,
        client_cert: bool,
        also: Sequence[ManagedProcess] = (),
    ) -> None:
        files = self._require_files()
        context = ssl.create_default_context(cafile=str(files.ca))
        if client_cert:
            context.load_cert_chain(str(files.admin_cert), str(files.admin_key))
        watched = [process, *also]

        def probe() -> bool:
            for proc in watched:
                code = proc.exit_code()
                if code is not None:
                    raise ClusterStartError(
                        f"{proc.name} exited with status {code} during start-up; "
                        f"last lines of {proc.log_path}:\n{proc.log_tail()}"
                    )
            connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=2, context=context)
            try:
                connection.request("GET", path)
                return connection.getresponse().status == 200
            except OSError:
                return False
            finally:
                connection.close()

        try:
            wait_for(
                probe,
                fatal=(ClusterStartError,),
                timeout=self.options.start_timeout,
                interval=0.1,
                what=f"{process.name} {path} on port {port}",
            )
        except WaitTimeout as exc:
            raise ClusterStartError(f"{exc}; last lines of {process.log_path}:\n{process.log_tail()}") from exc

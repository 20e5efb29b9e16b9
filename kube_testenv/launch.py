"""What the cluster runs: its options and the command-line flags of each component."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kube_testenv.datadir import ClusterFiles

#: Controllers the tests rely on: quota status, namespace deletion, service
#: accounts and their tokens, aggregated roles (``view``/``edit``/``admin`` get
#: their rules from clusterrole-aggregation), kube-root-ca.crt, and node
#: lifecycle (lifts the not-ready taint once a node reports Ready), and
#: ReplicaSets (their controller creates their pods, or records FailedCreate
#: when the namespace's quota refuses them). No job controller: the chart tests
#: play it, writing their Jobs' status themselves.
DEFAULT_CONTROLLERS: tuple[str, ...] = (
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "resourcequota-controller",
    "clusterrole-aggregation-controller",
    "root-ca-certificate-publisher-controller",
    "node-lifecycle-controller",
    "replicaset-controller",
)

ADMISSION_PLUGINS = "NamespaceLifecycle,LimitRanger,ServiceAccount,Priority,ResourceQuota"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"


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


def etcd_args(files: ClusterFiles, port: int, peer_port: int) -> list[str]:
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


def apiserver_args(files: ClusterFiles, port: int, etcd_port: int, options: ClusterOptions) -> list[str]:
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
        f"--v={options.verbosity}",
        *options.extra_apiserver_args,
    ]


def controller_manager_args(files: ClusterFiles, port: int, options: ClusterOptions) -> list[str]:
    return [
        f"--kubeconfig={files.controller_manager_kubeconfig}",
        "--leader-elect=false",
        f"--controllers={','.join(options.controllers)}",
        f"--root-ca-file={files.ca}",
        f"--service-account-private-key-file={files.sa_private}",
        f"--resource-quota-sync-period={options.resource_quota_sync_period}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--tls-cert-file={files.serving_cert}",
        f"--tls-private-key-file={files.serving_key}",
        "--profiling=false",
        f"--v={options.verbosity}",
        *options.extra_controller_manager_args,
    ]


def scheduler_args(files: ClusterFiles, port: int, options: ClusterOptions) -> list[str]:
    return [
        f"--kubeconfig={files.scheduler_kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--tls-cert-file={files.serving_cert}",
        f"--tls-private-key-file={files.serving_key}",
        "--profiling=false",
        f"--v={options.verbosity}",
        *options.extra_scheduler_args,
    ]

"""The cluster's data directory: where each file lives, and the PKI and kubeconfigs in it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kube_testenv.certs import CertificateAuthority, service_account_key
from kube_testenv.kubeconfig import write_kubeconfig

_SERVICE_IP = "10.0.0.1"  # first address of SERVICE_CLUSTER_IP_RANGE (launch.py): the kubernetes Service


@dataclass
class ClusterFiles:
    """Paths inside the data directory, filled in by :func:`write_pki`."""

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


def write_pki(files: ClusterFiles, server: str) -> CertificateAuthority:
    """Write a fresh CA, the serving and service-account keys, and the admin, controller-manager
    and scheduler kubeconfigs for *server* into *files*; returns the CA (it issues user
    certificates later)."""
    ca = CertificateAuthority()
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
        server,
        ca.cert_pem,
        admin,
        "gpuportal-admin",
    )
    # The controller-manager runs without --use-service-account-credentials,
    # so its own identity needs every controller's rights: system:masters.
    kcm = ca.issue("system:kube-controller-manager", organizations=["system:masters"])
    files.controller_manager_kubeconfig = write_kubeconfig(
        files.root / "controller-manager.kubeconfig",
        server,
        ca.cert_pem,
        kcm,
        "system:kube-controller-manager",
    )
    # The scheduler's bootstrap ClusterRoleBinding covers this identity.
    scheduler = ca.issue("system:kube-scheduler")
    files.scheduler_kubeconfig = write_kubeconfig(
        files.root / "scheduler.kubeconfig",
        server,
        ca.cert_pem,
        scheduler,
        "system:kube-scheduler",
    )
    return ca

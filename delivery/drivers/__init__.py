"""Cluster drivers behind one interface: ``manifests`` (a folder of YAML) and ``kubernetes``
(server-side apply through the cluster's kubeconfig)."""

from __future__ import annotations

from django.conf import settings

from clusters.crypto import KubeconfigUnreadable, kubeconfig_decrypt
from clusters.models import Cluster, ClusterDriverKind
from delivery import conf
from delivery.drivers.base import (
    EMPTY_RESULT,
    ApplyResult,
    Change,
    ClusterDriver,
    DriverError,
    PermanentDriverError,
    Plan,
    Scope,
)
from delivery.drivers.manifests import ManifestsDriver

__all__ = [
    "EMPTY_RESULT", "ApplyResult", "Change", "ClusterDriver", "DriverError", "PermanentDriverError", "Plan", "Scope",
    "driver_for",
]


def driver_for(cluster: Cluster) -> ClusterDriver:
    if cluster.driver == ClusterDriverKind.MANIFESTS:
        return ManifestsDriver(root=settings.GPUPORTAL_MANIFESTS_DIR, cluster=cluster.name)
    if cluster.driver == ClusterDriverKind.KUBERNETES:
        from delivery.drivers.kubernetes import KubernetesDriver

        if not cluster.kubeconfig_encrypted:
            raise PermanentDriverError(f"cluster {cluster.name} has no kubeconfig: upload one before pushing")
        try:
            kubeconfig = kubeconfig_decrypt(bytes(cluster.kubeconfig_encrypted))
        except KubeconfigUnreadable as error:
            raise PermanentDriverError(f"cluster {cluster.name}: {error}") from None
        return KubernetesDriver(
            cluster=cluster.name,
            kubeconfig=kubeconfig,
            concurrency=conf.kube_apply_concurrency(),
            timeout=conf.kube_request_timeout_seconds(),
        )
    raise PermanentDriverError(f"cluster {cluster.name}: driver {cluster.driver!r} is not available in this installation")

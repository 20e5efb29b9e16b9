"""Cluster drivers: ``manifests`` (a folder of YAML) here; ``kubernetes`` joins with cluster delivery."""

from __future__ import annotations

from django.conf import settings

from clusters.drivers.base import ApplyResult, ClusterDriver, DriverError
from clusters.drivers.manifests import ManifestsDriver
from clusters.models import Cluster, ClusterDriverKind

__all__ = ["ApplyResult", "ClusterDriver", "DriverError", "driver_for"]


def driver_for(cluster: Cluster) -> ClusterDriver:
    if cluster.driver == ClusterDriverKind.MANIFESTS:
        return ManifestsDriver(root=settings.GPUPORTAL_MANIFESTS_DIR, cluster=cluster.name)
    raise DriverError(f"cluster {cluster.name}: driver {cluster.driver!r} is not available in this installation")

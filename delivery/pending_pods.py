"""What waits on the cluster under an allocation: the pods of its project's namespace that have
been Pending longer than ``GPUPORTAL_PENDING_POD_THRESHOLD_SECONDS`` and the controllers whose pods
were refused, each explained (docs/pending.md, "Pending pods").

Scoped like the allocation (``allocation_get``: outsiders get 404). The read goes through the
cluster's driver, read-only (``ClusterDriver.read_pending``); what the portal granted the namespace
comes from its own data (the project's grants on the cluster). Each read replaces the namespace's
row of counts (``clusters.PendingPodsRead``) that ``gpuportal_pending_pods{reason}`` sums.
"""

from __future__ import annotations

import datetime
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Sum

from allocations.catalogue.selectors import allocation_get
from allocations.catalogue.states import ON_CLUSTER_STATES
from allocations.models import Allocation
from clusters.models import PendingPodsRead
from delivery import conf
from delivery.drivers import DriverError, driver_for
from delivery.drivers.base import NotReadable
from delivery.pod_reasons import PodExplanation, pod_explain
from kernel.clock import clock_now

READ = "read"
NOT_ON_CLUSTER = "not-on-cluster"
NOT_READABLE = "not-readable"
UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class PendingPods:
    allocation_id: int
    status: str  # read | not-on-cluster | not-readable | unreachable
    message: str = ""
    cluster: str = ""
    namespace: str = ""
    threshold_seconds: int = 0
    granted: dict[str, int] = field(default_factory=dict)
    pods: tuple[PodExplanation, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "allocation": self.allocation_id, "status": self.status, "message": self.message, "cluster": self.cluster,
            "namespace": self.namespace, "threshold_seconds": self.threshold_seconds, "granted": self.granted,
            "pods": [pod.as_dict() for pod in self.pods],
        }  # fmt: skip


def namespace_granted(allocation: Allocation) -> dict[str, int]:
    """What the project's grants on the allocation's cluster give its namespace, per resource."""
    rows = (
        Allocation.objects.filter(cluster=allocation.cluster, project_id=allocation.project_id, state__in=ON_CLUSTER_STATES)
        .values("flavor__resource_name").annotate(units=Sum("quantity")).order_by()
    )  # fmt: skip
    return {row["flavor__resource_name"]: int(row["units"] or 0) for row in rows}


def _record(allocation: Allocation, namespace: str, pods: tuple[PodExplanation, ...]) -> None:
    counts = dict(Counter(pod.code.value for pod in pods))
    PendingPodsRead.objects.update_or_create(
        cluster_id=allocation.cluster_id, namespace=namespace, defaults={"counts": counts, "read_at": clock_now()}
    )


def pending_pods_read(*, allocation: Allocation) -> PendingPods:
    """Read and explain what waits under ``allocation`` (already scoped to its reader)."""
    if allocation.cluster_id is None or allocation.state not in ON_CLUSTER_STATES:
        return PendingPods(allocation_id=allocation.pk, status=NOT_ON_CLUSTER,
                           message="The allocation has nothing on a cluster: no pods to read.")
    cluster, namespace = allocation.cluster, allocation.project.slug
    assert cluster is not None
    threshold = conf.pending_pod_threshold_seconds()
    base = PendingPods(allocation_id=allocation.pk, status=READ, cluster=cluster.name, namespace=namespace,
                       threshold_seconds=threshold, granted=namespace_granted(allocation))
    try:
        driver = driver_for(cluster)
        try:
            read = driver.read_pending(namespace=namespace, older_than=datetime.timedelta(seconds=threshold))
        finally:
            driver.close()
    except NotReadable as error:
        return replace(base, status=NOT_READABLE, message=str(error))
    except DriverError as error:
        return replace(base, status=UNREACHABLE, message=str(error))
    pods = tuple(pod_explain(workload, granted=base.granted, mig_pending=read.mig_pending) for workload in read.workloads)
    _record(allocation, namespace, pods)
    return replace(base, pods=pods)


def allocation_pending_pods(*, user: AbstractBaseUser | AnonymousUser, allocation_id: int) -> PendingPods:
    """The pending pods under an allocation ``user`` may read (else 404)."""
    return pending_pods_read(allocation=allocation_get(user=user, allocation_id=allocation_id))

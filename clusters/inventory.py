"""Writes to the inventory: clusters, nodes and their GPUs."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction

from audit import actions
from audit.services import audit_record
from clusters.models import Cluster, ClusterDriverKind, Gpu, Node
from gpuportal.errors import NotAllowed
from tenants.access import access_for


@dataclass(frozen=True)
class GpuSpec:
    index: int
    model: str
    memory_mib: int
    mig_capable: bool = False
    uuid: str = ""


@transaction.atomic
def cluster_create(
    *, actor: User | None, name: str, display_name: str = "", driver: str = ClusterDriverKind.MANIFESTS
) -> Cluster:
    if actor is not None and not access_for(actor).is_platform_admin:
        raise NotAllowed("Only platform admins may register clusters.")
    cluster = Cluster(name=name, display_name=display_name, driver=driver)
    cluster.full_clean()
    cluster.save()
    audit_record(actor=actor, action=actions.CLUSTER_CREATED, target=cluster, after={"name": name, "driver": driver})
    return cluster


@transaction.atomic
def node_upsert(
    *,
    actor: User | None,
    cluster: Cluster,
    name: str,
    cpu_millicores: int,
    memory_mib: int,
    gpus: list[GpuSpec],
    labels: dict[str, str] | None = None,
) -> Node:
    """Create or refresh a node and make its GPU list exactly ``gpus``."""
    node, created = Node.objects.select_for_update().get_or_create(
        cluster=cluster, name=name, defaults={"cpu_millicores": cpu_millicores, "memory_mib": memory_mib}
    )
    before = {
        "cpu_millicores": node.cpu_millicores,
        "memory_mib": node.memory_mib,
        "gpus": [(gpu.index, gpu.model, gpu.memory_mib, gpu.mig_capable) for gpu in node.gpus.order_by("index")],
    }
    node.cpu_millicores = cpu_millicores
    node.memory_mib = memory_mib
    node.labels = labels or {}
    node.full_clean()
    node.save()
    wanted = {spec.index: spec for spec in gpus}
    node.gpus.exclude(index__in=list(wanted)).delete()
    for spec in gpus:
        Gpu.objects.update_or_create(
            node=node,
            index=spec.index,
            defaults={"model": spec.model, "memory_mib": spec.memory_mib, "mig_capable": spec.mig_capable, "uuid": spec.uuid},
        )
    after = {
        "cpu_millicores": cpu_millicores,
        "memory_mib": memory_mib,
        "gpus": [(spec.index, spec.model, spec.memory_mib, spec.mig_capable) for spec in sorted(gpus, key=lambda g: g.index)],
    }
    if created or before != after:
        audit_record(
            actor=actor,
            action=actions.NODE_UPDATED,
            target=node,
            before={} if created else before,
            after=after,
        )
    return node

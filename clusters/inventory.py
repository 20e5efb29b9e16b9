"""Writes to the inventory: clusters, nodes and their GPUs."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction

from audit import actions
from audit.services import audit_record
from clusters.models import Cluster, ClusterDriverKind, Gpu, Node
from tenants.access import require_platform_admin


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
    if actor is not None:
        require_platform_admin(actor, to="register clusters")
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
        fields: dict[str, object] = {"model": spec.model, "memory_mib": spec.memory_mib, "mig_capable": spec.mig_capable}
        if spec.uuid:  # labels carry no UUID: keep the one the node agent observed
            fields["uuid"] = spec.uuid
        Gpu.objects.update_or_create(node=node, index=spec.index, defaults=fields)
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


# ----------------------------------------------------------------- what the node agent observed


@dataclass(frozen=True)
class ObservedGpuSpec:
    """One GPU as the node agent read it through NVML. None: the agent could not tell."""

    index: int
    uuid: str
    model: str | None = None  # already in the inventory's form (gpu_model_from_nvml_name)
    memory_mib: int | None = None
    mig_capable: bool | None = None


def gpu_model_from_nvml_name(name: str) -> str:
    """NVML's name in the form GPU feature discovery's ``nvidia.com/gpu.product`` label and the
    flavors use: ``NVIDIA A100-SXM4-80GB`` → ``NVIDIA-A100-SXM4-80GB``."""
    return "-".join(name.split())


_PARKED_INDEX = 30000  # above any real index: where rows wait while indexes are exchanged


def _gpu_facts(gpu: Gpu) -> list[object]:
    return [gpu.index, gpu.uuid, gpu.model, gpu.memory_mib, gpu.mig_capable]


@transaction.atomic
def node_gpus_observe(*, node: Node, gpus: list[ObservedGpuSpec]) -> dict[str, Gpu]:
    """Bring the node's inventory GPUs in line with what its agent observed.

    Rows are matched by UUID first; an observed GPU whose UUID no row has takes over the row at its
    index when that row has no UUID yet (discovered from labels) or one the node no longer reports
    (the card was replaced); otherwise a row is added. Model, memory and MIG capability are filled
    where the agent could read them. A row the agent does not report is kept (reservations may
    refer to it); only if a reported GPU needs its index is it moved above the reported ones.
    UUIDs and indexes must be unique in ``gpus``. Audited as ``node.updated`` when anything
    changed. Returns the row of each observed UUID.
    """
    Node.objects.select_for_update().filter(pk=node.pk).values_list("pk").get()  # lock order: node, then its GPUs
    rows = list(Gpu.objects.select_for_update().filter(node=node).order_by("pk"))
    before = {row.pk: _gpu_facts(row) for row in rows}
    matched = _match_observed(rows, gpus)
    _reindex(rows, gpus, matched)
    specs = {spec.uuid: spec for spec in gpus}
    for uuid, row in matched.items():
        _apply_observation(row, specs[uuid])
    for row in rows:  # the database enforces (node, index); clean the fields only
        if _gpu_facts(row) != before[row.pk]:
            row.full_clean(validate_unique=False, validate_constraints=False)
            row.save()
    for spec in sorted(gpus, key=lambda spec: spec.index):
        if spec.uuid not in matched:
            matched[spec.uuid] = _add_observed(node, spec)
            rows.append(matched[spec.uuid])
    _audit_observation(node, rows, before)
    return matched


def _match_observed(rows: list[Gpu], gpus: list[ObservedGpuSpec]) -> dict[str, Gpu]:
    """The row each observed GPU takes: the one with its UUID, else the one at its index when that
    row has no UUID or one the node no longer reports; a GPU matching no free row is left out."""
    observed_uuids = {spec.uuid for spec in gpus}
    by_uuid = {row.uuid: row for row in rows if row.uuid}
    by_index = {row.index: row for row in rows}
    matched: dict[str, Gpu] = {}
    taken: set[int] = set()
    for spec in sorted(gpus, key=lambda spec: spec.index):
        row = by_uuid.get(spec.uuid)
        if row is None:
            candidate = by_index.get(spec.index)
            if candidate is not None and candidate.pk not in taken and candidate.uuid not in observed_uuids:
                row = candidate
        if row is not None and row.pk not in taken:
            matched[spec.uuid] = row
            taken.add(row.pk)
    return matched


def _reindex(rows: list[Gpu], gpus: list[ObservedGpuSpec], matched: dict[str, Gpu]) -> None:
    """Give each matched row its observed index and move an unreported row standing on a reported
    index above the reported ones; moved rows are parked first so (node, index) stays unique."""
    targets: dict[int, int] = {matched[spec.uuid].pk: spec.index for spec in gpus if spec.uuid in matched}
    claimed = {spec.index for spec in gpus}
    free = max([*claimed, *(row.index for row in rows)], default=-1) + 1
    for row in rows:
        if row.pk not in targets:
            if row.index in claimed:
                targets[row.pk] = free  # an unreported GPU standing where a reported one is
                free += 1
            else:
                targets[row.pk] = row.index
    moving = [row for row in rows if targets[row.pk] != row.index]
    for offset, row in enumerate(moving):
        Gpu.objects.filter(pk=row.pk).update(index=_PARKED_INDEX + offset)
    for row in moving:
        row.index = targets[row.pk]


def _add_observed(node: Node, spec: ObservedGpuSpec) -> Gpu:
    """A new row for an observed GPU no row matched."""
    row = Gpu(node=node, index=spec.index, model=spec.model or "unknown", memory_mib=spec.memory_mib or 0,
              mig_capable=bool(spec.mig_capable), uuid=spec.uuid)
    row.full_clean(validate_unique=False, validate_constraints=False)
    row.save()
    return row


def _audit_observation(node: Node, rows: list[Gpu], before: dict[int, list[object]]) -> None:
    """``node.updated`` with the GPUs before and after, when anything changed."""
    after = {row.pk: _gpu_facts(row) for row in rows}
    if after != before:
        ordered = sorted(rows, key=lambda row: row.index)
        audit_record(
            actor=None,
            action=actions.NODE_UPDATED,
            target=node,
            before={"gpus": [before[row.pk] for row in ordered if row.pk in before]},
            after={"gpus": [after[row.pk] for row in ordered]},
            details={"source": "node agent"},
        )


def _apply_observation(row: Gpu, spec: ObservedGpuSpec) -> None:
    row.uuid = spec.uuid
    if spec.model:
        row.model = spec.model
    if spec.memory_mib is not None:
        row.memory_mib = spec.memory_mib
    if spec.mig_capable is not None:
        row.mig_capable = spec.mig_capable

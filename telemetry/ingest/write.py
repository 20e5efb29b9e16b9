"""Applying a report's change set (``changeset.ChangeSet``) inside the ingest's transaction.

The order is the ingest's lock order: observed GPUs (inserted, then updated), their MIG devices,
the raw samples, then the inventory (``node_gpus_observe`` locks the node, then its GPUs, and
audits its own change), and last the audited part, so the audit chain's lock is taken as late as
possible and held until the commit: the audit events, then the report state.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.db.models import F

from audit.services import audit_record
from clusters import inventory
from clusters.models import Node
from telemetry.ingest.changes import inventory_relinks
from telemetry.ingest.changeset import InventoryObservation, NodeChanges, RowChanges
from telemetry.ingest.sql import rows_insert_ignoring_conflicts, rows_update
from telemetry.ingest.stored import (
    GPU_FIELD_NAMES,
    GPU_READING_FIELD_NAMES,
    GPU_STATE_FIELD_NAMES,
    MIG_DEVICE_FIELD_NAMES,
)
from telemetry.models import GpuSample, NodeReportState, ObservedGpu, ObservedMigInstance, SampleTier

_SAMPLE_FIELDS = (
    "gpu_id", "tier", "at", "samples", "gpu_percent", "memory_percent", "memory_used_bytes", "temperature_celsius",
    "power_milliwatts",
)  # fmt: skip
_STATE_FIELDS = (
    "token_id", "agent_version", "agent_started_at", "sequence", "collected_at", "received_at", "interval_seconds",
    "stale_at", "undelivered_reports", "reports_accepted", "driver_version", "cuda_driver_version", "errors",
    "is_stale", "stale_since", "mig_mismatch", "mig_reset_pending", "mig_detail", "unidentified_gpus",
)  # fmt: skip
# What changes from one report to the next is written every time; the rest of an observed GPU
# (its state) only when it changed on one of the node's GPUs.
_GPU_WRITES = {False: GPU_READING_FIELD_NAMES, True: GPU_READING_FIELD_NAMES + GPU_STATE_FIELD_NAMES}


def report_discard(*, node_id: int) -> None:
    """Count a report that was not newer than the last one accepted."""
    NodeReportState.objects.filter(pk=node_id).update(reports_discarded=F("reports_discarded") + 1)


def rows_apply(*, node: Node, rows: RowChanges) -> None:
    """The observed GPUs, their MIG devices, the raw samples, then the inventory."""
    pks = dict(rows.stored_pks)
    if rows.gpus_created:
        created = [
            ObservedGpu(node=node, uuid=item.uuid, first_seen_at=item.first_seen_at,
                        **{name: getattr(item.fields, name) for name in GPU_FIELD_NAMES})
            for item in rows.gpus_created
        ]  # fmt: skip
        ObservedGpu.objects.bulk_create(created)
        pks.update((row.uuid, row.pk) for row in created)
    names = _GPU_WRITES[rows.gpu_state_changed]
    rows_update(
        ObservedGpu, names, [(item.pk, [getattr(item.fields, name) for name in names]) for item in rows.gpus_updated]
    )

    if rows.mig_replaced_on:
        ObservedMigInstance.objects.filter(gpu_id__in=rows.mig_replaced_on).delete()
    if rows.mig_created:
        ObservedMigInstance.objects.bulk_create(
            ObservedMigInstance(gpu_id=pks[item.gpu_uuid], **{name: getattr(item.device, name) for name in MIG_DEVICE_FIELD_NAMES})
            for item in rows.mig_created
        )
    rows_update(
        ObservedMigInstance, ["memory_used_bytes"], [(item.pk, [item.memory_used_bytes]) for item in rows.mig_memory_updates]
    )

    rows_insert_ignoring_conflicts(
        GpuSample,
        _SAMPLE_FIELDS,
        [
            (pks[sample.gpu_uuid], SampleTier.RAW, sample.at, 1, sample.gpu_percent, sample.memory_percent,
             sample.memory_used_bytes, sample.temperature_celsius, sample.power_milliwatts)
            for sample in rows.samples
        ],
    )  # fmt: skip

    if rows.inventory is not None:
        _inventory_observe(node, rows.inventory, pks)


def node_apply(*, node: Node, changes: NodeChanges) -> None:
    """The audit events, in order, then the node's report state."""
    for event in changes.audit_events:
        if event.target_node_id != node.pk:
            raise ValueError(f"an audit event of node {event.target_node_id} in a report of node {node.pk}")
        audit_record(
            actor=None, action=event.action, target=node, before=event.before, after=event.after, details=event.details
        )
    rows_update(NodeReportState, _STATE_FIELDS, [(node.pk, [getattr(changes.state, name) for name in _STATE_FIELDS])])


def _inventory_observe(node: Node, observation: InventoryObservation, pks: Mapping[str, int]) -> None:
    """Update the inventory's GPUs (audited there) and point each observed GPU at its row."""
    matched = inventory.node_gpus_observe(node=node, gpus=list(observation.specs))
    relinked = inventory_relinks(observation.links, {uuid: gpu.pk for uuid, gpu in matched.items()})
    rows_update(ObservedGpu, ["gpu_id"], [(pks[uuid], [gpu_id]) for uuid, gpu_id in relinked])

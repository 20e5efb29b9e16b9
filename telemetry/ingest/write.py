"""Applying a report's change set (``changeset.ChangeSet``) inside the ingest's transaction.

The order is the ingest's lock order: observed GPUs (inserted, then updated), their MIG devices,
the raw samples, then the inventory (``node_gpus_observe`` locks the node, then its GPUs, and
audits its own change), and last the audited part, so the audit chain's lock is taken as late as
possible and held until the commit: the audit events, then the report state.

The plain row writes go into ``sql.Statements`` (one round trip for all of them on PostgreSQL);
the rare writes through the ORM (new GPUs, a new MIG layout, the inventory, audit events) flush it
first, so the order above holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from audit.services import audit_record
from clusters import inventory
from clusters.models import Node
from telemetry.ingest.changes import inventory_relinks
from telemetry.ingest.changeset import InventoryObservation, NodeChanges, ReportStateUpdate, RowChanges
from telemetry.ingest.sql import Statements
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
STATE_FIELDS = (
    "token_id", "agent_version", "agent_started_at", "sequence", "collected_at", "received_at", "interval_seconds",
    "stale_at", "undelivered_reports", "reports_accepted", "driver_version", "cuda_driver_version", "errors",
    "is_stale", "stale_since", "mig_mismatch", "mig_reset_pending", "mig_detail", "unidentified_gpus",
)  # fmt: skip


def report_discard(*, node_id: int, statements: Statements) -> None:
    """Count a report that was not newer than the last one accepted."""
    quote = statements.connection.ops.quote_name
    column = quote("reports_discarded")
    statements.add(
        f"UPDATE {quote(NodeReportState._meta.db_table)} SET {column} = {column} + 1 WHERE {quote('node_id')} = %s",  # noqa: S608
        [node_id],
    )


def rows_apply(*, node: Node, rows: RowChanges, statements: Statements) -> None:
    """The observed GPUs, their MIG devices, the raw samples, then the inventory."""
    pks = dict(rows.stored_pks)
    if rows.gpus_created:
        statements.flush()
        created = [
            ObservedGpu(node=node, uuid=item.uuid, first_seen_at=item.first_seen_at,
                        **{name: getattr(item.fields, name) for name in GPU_FIELD_NAMES})
            for item in rows.gpus_created
        ]  # fmt: skip
        ObservedGpu.objects.bulk_create(created)
        pks.update((row.uuid, row.pk) for row in created)
    # What changes from one report to the next is written every time; the rest of an observed GPU
    # (its state) only when it changed on one of the node's GPUs.
    names = [name for name in GPU_READING_FIELD_NAMES if name not in rows.unchanged_readings]
    if rows.gpu_state_changed:
        names.extend(GPU_STATE_FIELD_NAMES)
    statements.update(
        ObservedGpu, names, [(item.pk, [getattr(item.fields, name) for name in names]) for item in rows.gpus_updated]
    )

    if rows.mig_replaced_on or rows.mig_created:
        statements.flush()
    if rows.mig_replaced_on:
        ObservedMigInstance.objects.filter(gpu_id__in=rows.mig_replaced_on).delete()
    if rows.mig_created:
        ObservedMigInstance.objects.bulk_create(
            ObservedMigInstance(gpu_id=pks[item.gpu_uuid], **{name: getattr(item.device, name) for name in MIG_DEVICE_FIELD_NAMES})
            for item in rows.mig_created
        )
    statements.update(
        ObservedMigInstance, ["memory_used_bytes"], [(item.pk, [item.memory_used_bytes]) for item in rows.mig_memory_updates]
    )

    statements.insert_ignoring_conflicts(
        GpuSample,
        _SAMPLE_FIELDS,
        [
            (pks[sample.gpu_uuid], SampleTier.RAW, sample.at, 1, sample.gpu_percent, sample.memory_percent,
             sample.memory_used_bytes, sample.temperature_celsius, sample.power_milliwatts)
            for sample in rows.samples
        ],
    )  # fmt: skip

    if rows.inventory is not None:
        statements.flush()
        _inventory_observe(node, rows.inventory, pks)


def node_apply(*, node: Node, state: NodeReportState, changes: NodeChanges, statements: Statements) -> None:
    """The audit events, in order, then the node's report state: the columns that changed
    (``state`` is the row as the report found it)."""
    if changes.audit_events:
        statements.flush()
    for event in changes.audit_events:
        if event.target_node_id != node.pk:
            raise ValueError(f"an audit event of node {event.target_node_id} in a report of node {node.pk}")
        audit_record(
            actor=None, action=event.action, target=node, before=event.before, after=event.after, details=event.details
        )
    new: dict[str, Any] = {name: getattr(changes.state, name) for name in STATE_FIELDS}
    changed = [name for name, value in new.items() if getattr(state, name) != value]
    statements.update(NodeReportState, changed, [(node.pk, [new[name] for name in changed])])


def node_versions_apply(*, node: Node, state: ReportStateUpdate, statements: Statements) -> None:
    """Keep the inventory node's driver and CUDA versions (what flavors' minimums are checked
    against) as the report says, writing only a change. A report that could not read a version
    (empty) leaves the one known before: a failed NVML call is no sign of another driver."""
    new = {"driver_version": state.driver_version, "cuda_version": state.cuda_driver_version}
    changed = [name for name, value in new.items() if value and getattr(node, name) != value]
    if changed:
        statements.update(Node, changed, [(node.pk, [new[name] for name in changed])])
        for name in changed:
            setattr(node, name, new[name])


def _inventory_observe(node: Node, observation: InventoryObservation, pks: Mapping[str, int]) -> None:
    """Update the inventory's GPUs (audited there) and point each observed GPU at its row."""
    matched = inventory.node_gpus_observe(node=node, gpus=list(observation.specs))
    relinked = inventory_relinks(observation.links, {uuid: gpu.pk for uuid, gpu in matched.items()})
    if relinked:
        statements = Statements()
        statements.update(ObservedGpu, ["gpu_id"], [(pks[uuid], [gpu_id]) for uuid, gpu_id in relinked])
        statements.flush()

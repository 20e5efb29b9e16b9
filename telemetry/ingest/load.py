"""What the ingest of one report reads: the node's report state (locked), its observed GPUs with
their inventory rows, their MIG devices and the node's MIG plan, as ``stored`` values.

A fixed number of queries whatever the number of GPUs: the locked report state with its node (on a
node's first report, the node and a new report state instead), the observed GPUs joined with their
inventory rows, the MIG devices when ``changes.mig_devices_needed``, and the plan's own reads when
the node's MIG config label names a layout the portal rendered.
"""

from __future__ import annotations

import datetime

from agent.report import AgentReport
from clusters.models import Node
from kernel.errors import ApplicationError
from telemetry.ingest.changes import mig_devices_needed, mig_plan_gpu
from telemetry.ingest.stored import (
    GPU_FIELD_NAMES,
    MIG_DEVICE_FIELD_NAMES,
    GpuFields,
    InventoryGpu,
    MigDevice,
    PlannedMig,
    StoredGpu,
    StoredNode,
    StoredReportState,
)
from telemetry.models import NodeReportState, ObservedGpu, ObservedMigInstance
from telemetry.selectors import node_planned_mig

_MIG_COLUMNS = ("pk", "gpu_id", *MIG_DEVICE_FIELD_NAMES)


class UnknownNode(ApplicationError):
    status = 404
    code = "node_unknown"


def report_state_for_update(*, cluster_id: int, node_name: str) -> NodeReportState:
    """The node's report state, locked, with its node; created on the node's first report. The
    first lock a report takes: reports of one node are applied one at a time."""
    try:
        return (
            NodeReportState.objects.select_for_update(of=("self",))
            .select_related("node")
            .get(node__cluster_id=cluster_id, node__name=node_name)
        )
    except NodeReportState.DoesNotExist:
        pass
    node = Node.objects.filter(cluster_id=cluster_id, name=node_name).first()
    if node is None:
        raise UnknownNode(f"The cluster has no node {node_name} in its inventory.")
    state, _ = NodeReportState.objects.select_for_update().get_or_create(node=node)
    return state


def stored_report_state(state: NodeReportState, *, received_at: datetime.datetime) -> StoredReportState:
    return StoredReportState(
        node_id=state.node_id,
        agent_started_at=state.agent_started_at,
        sequence=state.sequence,
        stale_at=state.stale_at,
        stale_on_receipt=state.is_stale_at(received_at),
        is_stale=state.is_stale,
        stale_since=state.stale_since,
        mig_mismatch=state.mig_mismatch,
        mig_reset_pending=state.mig_reset_pending,
        mig_detail=state.mig_detail,
        unidentified_gpus=state.unidentified_gpus,
        reports_accepted=state.reports_accepted,
    )


def stored_node(*, node: Node, state: StoredReportState, report: AgentReport) -> StoredNode:
    """The rest of what the report is compared with (``state`` was read and locked first)."""
    # In the database's order, as the ingest always read them (the order of ``absent`` in an audit event).
    gpus = tuple(_stored_gpu(row) for row in ObservedGpu.objects.filter(node=node).select_related("gpu").order_by())
    devices: dict[int, tuple[MigDevice, ...]] = {}
    if mig_devices_needed(gpus, report):
        rows = ObservedMigInstance.objects.filter(gpu_id__in=[gpu.pk for gpu in gpus]).order_by("gpu_id", "slot")
        grouped: dict[int, list[MigDevice]] = {}
        for pk, gpu_id, *values in rows.values_list(*_MIG_COLUMNS):
            grouped.setdefault(gpu_id, []).append(MigDevice(**dict(zip(MIG_DEVICE_FIELD_NAMES, values, strict=True)), pk=pk))
        devices = {gpu_id: tuple(found) for gpu_id, found in grouped.items()}
    return StoredNode(state=state, gpus=gpus, mig_devices=devices, planned_mig=planned_mig(node=node, report=report))


def planned_mig(*, node: Node, report: AgentReport) -> PlannedMig:
    """The node's MIG plan as it stands now (a layout the portal rendered is read from the
    inventory's GPUs and the reservations on them)."""
    gpu_model, memory_mib = mig_plan_gpu(report)
    entries, config_state = node_planned_mig(node=node, gpu_model=gpu_model, memory_mib=memory_mib)
    return PlannedMig(entries=entries, config_state=config_state)


def _stored_gpu(row: ObservedGpu) -> StoredGpu:
    fields = GpuFields(**{name: getattr(row, name) for name in GPU_FIELD_NAMES})
    gpu = row.gpu
    inventory = None
    if gpu is not None:
        inventory = InventoryGpu(
            pk=gpu.pk, uuid=gpu.uuid, index=gpu.index, model=gpu.model, memory_mib=gpu.memory_mib, mig_capable=gpu.mig_capable
        )
    return StoredGpu(pk=row.pk, uuid=row.uuid, fields=fields, inventory=inventory)

"""What the ingest of one report reads: the node's report state (locked), its observed GPUs with
their inventory rows, their MIG devices and the node's MIG plan, as ``stored`` values.

A fixed number of queries whatever the number of GPUs: the locked report state with its node (on a
node's first report, the node and a new report state instead), the observed GPUs joined with their
inventory rows, the MIG devices when ``changes.mig_devices_needed``, and the plan's own reads when
the node's MIG config label names a layout the portal rendered. The first three are raw SQL
(``sql.Columns``): they run on every report, and the ORM's cost of building them is larger than
the database's of answering them.

The state is locked first and the GPUs are read by a statement of their own, after the lock is
held: a report waiting for another report of its node then reads the GPUs as the other one left
them (one statement joining both would read them as they were before the wait).
"""

from __future__ import annotations

import datetime
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from agent.report import AgentReport
from clusters.models import Gpu, Node
from kernel.errors import ApplicationError
from telemetry.ingest.changes import mig_devices_needed, mig_plan_gpu
from telemetry.ingest.sql import Columns, cached_text
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

_STATE = Columns(NodeReportState, "s")
_NODE = Columns(Node, "n")
_GPU = Columns(ObservedGpu, "g", ("id", "uuid", *GPU_FIELD_NAMES))
_INVENTORY = Columns(Gpu, "i", ("id", "uuid", "index", "model", "memory_mib", "mig_capable"))
_MIG = Columns(ObservedMigInstance, "m", ("id", "gpu_id", *MIG_DEVICE_FIELD_NAMES))


class UnknownNode(ApplicationError):
    status = 404
    code = "node_unknown"


def report_state_for_update(*, cluster_id: int, node_name: str) -> NodeReportState:
    """The node's report state, locked, with its node; created on the node's first report. The
    first lock a report takes: reports of one node are applied one at a time."""
    connection = transaction.get_connection()
    sql = cached_text(("report-state", connection.vendor), lambda: _report_state_sql(connection))
    with connection.cursor() as cursor:
        cursor.execute(sql, [cluster_id, node_name])
        row = cursor.fetchone()
    if row is not None:
        state: NodeReportState = _STATE.instance(row[: len(_STATE)], connection)
        state.node = _NODE.instance(row[len(_STATE) :], connection)
        return state
    node = Node.objects.filter(cluster_id=cluster_id, name=node_name).first()
    if node is None:
        raise UnknownNode(f"The cluster has no node {node_name} in its inventory.")
    state, _ = NodeReportState.objects.select_for_update().get_or_create(node=node)
    return state


def _report_state_sql(connection: BaseDatabaseWrapper) -> str:
    quote = connection.ops.quote_name
    lock = " FOR UPDATE OF s" if connection.features.has_select_for_update_of else ""
    return (
        f"SELECT {_STATE.select(connection)}, {_NODE.select(connection)}"  # noqa: S608 (names from the models)
        f" FROM {quote(NodeReportState._meta.db_table)} s INNER JOIN {quote(Node._meta.db_table)} n"
        f" ON n.{quote('id')} = s.{quote('node_id')} WHERE n.{quote('cluster_id')} = %s AND n.{quote('name')} = %s{lock}"
    )


def _observed_gpus_sql(connection: BaseDatabaseWrapper) -> str:
    quote = connection.ops.quote_name
    return (
        f"SELECT {_GPU.select(connection)}, {_INVENTORY.select(connection)}"  # noqa: S608 (names from the models)
        f" FROM {quote(ObservedGpu._meta.db_table)} g LEFT OUTER JOIN {quote(Gpu._meta.db_table)} i"
        f" ON i.{quote('id')} = g.{quote('gpu_id')} WHERE g.{quote('node_id')} = %s"
    )


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
    connection = transaction.get_connection()
    quote = connection.ops.quote_name
    # In the database's order, as the ingest always read them (the order of ``absent`` in an audit event).
    sql = cached_text(("observed-gpus", connection.vendor), lambda: _observed_gpus_sql(connection))
    with connection.cursor() as cursor:
        cursor.execute(sql, [node.pk])
        gpus = tuple(_stored_gpu(row, connection) for row in cursor.fetchall())
    devices: dict[int, tuple[MigDevice, ...]] = {}
    if gpus and mig_devices_needed(gpus, report):
        placeholders = ", ".join(["%s"] * len(gpus))
        sql = (
            f"SELECT {_MIG.select(connection)} FROM {quote(ObservedMigInstance._meta.db_table)} m"  # noqa: S608
            f" WHERE m.{quote('gpu_id')} IN ({placeholders}) ORDER BY m.{quote('gpu_id')}, m.{quote('slot')}"
        )
        grouped: dict[int, list[MigDevice]] = {}
        with connection.cursor() as cursor:
            cursor.execute(sql, [gpu.pk for gpu in gpus])
            for row in cursor.fetchall():
                pk, gpu_id, *values = _MIG.converted(row, connection)
                device = MigDevice(**dict(zip(MIG_DEVICE_FIELD_NAMES, values, strict=True)), pk=pk)
                grouped.setdefault(gpu_id, []).append(device)
        devices = {gpu_id: tuple(found) for gpu_id, found in grouped.items()}
    return StoredNode(state=state, gpus=gpus, mig_devices=devices, planned_mig=planned_mig(node=node, report=report))


def planned_mig(*, node: Node, report: AgentReport) -> PlannedMig:
    """The node's MIG plan as it stands now (a layout the portal rendered is read from the
    inventory's GPUs and the reservations on them)."""
    gpu_model, memory_mib = mig_plan_gpu(report)
    entries, config_state = node_planned_mig(node=node, gpu_model=gpu_model, memory_mib=memory_mib)
    return PlannedMig(entries=entries, config_state=config_state)


def _stored_gpu(row: tuple[Any, ...], connection: BaseDatabaseWrapper) -> StoredGpu:
    pk, uuid, *values = _GPU.converted(row[: len(_GPU)], connection)
    fields = GpuFields(**dict(zip(GPU_FIELD_NAMES, values, strict=True)))
    inventory = None
    if row[len(_GPU)] is not None:
        found = _INVENTORY.converted(row[len(_GPU) :], connection)
        inventory = InventoryGpu(*found)
    return StoredGpu(pk=pk, uuid=uuid, fields=fields, inventory=inventory)

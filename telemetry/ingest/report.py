"""The node agent's report, stored (``node_report_ingest``): read, decide, write, in one transaction.

1. ``load``: lock the node's report state, then read its observed GPUs with their inventory rows,
   their MIG devices and the node's MIG plan (a fixed number of queries).
2. ``changes.report_changes``: a pure function from that and the report to a change set, in two
   steps: the rows (``rows.report_rows``), written first, then the node's audited part
   (``changes.report_node_changes``), decided once against the MIG plan as it stands after the
   rows (read again when they changed the inventory).
3. ``write``: apply the change set with batched statements, in the lock order below. A steady
   report (readings only) costs five round trips: the lock, the GPUs, one batch of writes (the
   GPUs' readings, the samples, the report state's changed columns, the token's last use when
   due), and the transaction's BEGIN and COMMIT. The inventory node's driver and CUDA versions
   (what flavors' minimums are checked against) join that batch only when they change.

A report that changes the inventory, GPU presence or a MIG flag, or brings a stale node back,
writes its audit events in the same transaction. A report that changes nothing but readings
writes no event (they are samples, not decisions), so the hot path never takes the audit chain's
lock.
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass

from django.db import transaction

from agent.report import AgentReport
from custody.ingest import custody_report_apply
from telemetry import conf
from telemetry.ingest import load, write
from telemetry.ingest.changes import report_check, report_node_changes, report_out_of_order
from telemetry.ingest.load import UnknownNode
from telemetry.ingest.rows import report_rows
from telemetry.ingest.sql import Statements
from telemetry.models import NodeReportState, NodeToken
from telemetry.node_tokens import node_token_touch_due

__all__ = ["ReportOutcome", "UnknownNode", "node_report_ingest", "report_check"]


@dataclass(frozen=True)
class ReportOutcome:
    accepted: bool
    reason: str  # accepted | out_of_order
    stale_at: datetime.datetime | None


@transaction.atomic
def node_report_ingest(
    *, token: NodeToken, node_name: str, report: AgentReport, received_at: datetime.datetime
) -> ReportOutcome:
    """Store one checked report (schema-valid, ``report_check`` passed) of the token's cluster's
    node ``node_name`` (404 when the inventory has no such node).

    A report not newer, by (agent_started_at, sequence), than the last one accepted is counted and
    discarded while the node is fresh. Otherwise it replaces what was known
    (``changes.report_changes`` says how).

    Locks, in this order: the node's report state, the token (its last use, at most once a
    minute), the observed GPU and MIG device rows it writes, the node and its inventory GPUs when the
    inventory changes, the audit chain when anything is audited.
    """
    state = load.report_state_for_update(cluster_id=token.cluster_id, node_name=node_name)
    node = state.node
    statements = Statements()
    if node_token_touch_due(token=token, now=received_at):
        statements.update(NodeToken, ["last_used_at"], [(token.pk, [received_at])])
        token.last_used_at = received_at
    stored_state = load.stored_report_state(state, received_at=received_at)
    if report_out_of_order(stored_state, report):
        write.report_discard(node_id=node.pk, statements=statements)
        statements.flush()
        return ReportOutcome(accepted=False, reason="out_of_order", stale_at=stored_state.stale_at)

    stored = load.stored_node(node=node, state=stored_state, report=report)
    stale_after = conf.stale_after(report["interval_seconds"])
    rows, presence = report_rows(stored, report, received_at=received_at)
    write.rows_apply(node=node, rows=rows, statements=statements)
    if rows.inventory is not None:
        # A MIG layout the portal rendered is planned on the inventory's GPUs, which were just
        # written: compare the MIG state with the plan as it stands now.
        stored = dataclasses.replace(stored, planned_mig=load.planned_mig(node=node, report=report))
    changes = report_node_changes(
        stored, report, presence, token_id=token.pk, received_at=received_at, stale_after=stale_after
    )
    write.node_versions_apply(node=node, state=changes.state, statements=statements)
    write.node_apply(node=node, state=state, changes=changes, statements=statements)
    statements.flush()
    carries_custody = "pod_devices" in report or bool(report.get("pod_resources_error"))
    if carries_custody or state.custody_reported:  # the ledger reads it, after the inventory's GPUs are written
        custody_report_apply(node=node, report=report, received_at=received_at)
    if carries_custody != state.custody_reported:
        NodeReportState.objects.filter(pk=node.pk).update(custody_reported=carries_custody)
    return ReportOutcome(accepted=True, reason="accepted", stale_at=changes.state.stale_at)

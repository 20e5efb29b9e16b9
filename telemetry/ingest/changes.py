"""What one accepted report changes: a pure function of the stored state and the report.

``report_changes`` takes the node as ``telemetry.ingest.load`` read it (``stored.StoredNode``, plain
values) and a checked report, and returns a ``changeset.ChangeSet`` in two steps: the rows
(``rows.report_rows``: the observed GPUs to create and update, their MIG devices to replace or
update, the raw samples to insert, the inventory observation to make) and the node's audited part
(``report_node_changes``: the audit events to write and the report state's new values). No ORM, no
I/O, no clock: the moment of receipt and the staleness window come in as arguments, and
``telemetry.ingest.write`` applies the result.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence

from agent.report import AgentReport
from audit import actions
from kernel.errors import FieldError
from telemetry import mig
from telemetry.ingest.changeset import AuditEntry, ChangeSet, NodeChanges, ReportStateUpdate
from telemetry.ingest.rows import GpuPresence, mig_capable, report_rows, report_timestamp
from telemetry.ingest.stored import PlannedMig, StoredGpu, StoredNode, StoredReportState

_MAX_INT = 2**31 - 1


def report_check(*, report: AgentReport) -> None:
    """What the schema cannot say: UUIDs and indexes are unique among a report's GPUs, and MIG
    device slots among a GPU's MIG devices."""
    seen_uuids: set[str] = set()
    seen_indexes: set[int] = set()
    for position, gpu in enumerate(report["gpus"]):
        if gpu["index"] in seen_indexes:
            pointer = f"/gpus/{position}/index"
            raise FieldError(pointer, f"GPU index {gpu['index']} appears twice in the report ({pointer}).")
        seen_indexes.add(gpu["index"])
        seen_slots: set[int] = set()
        for slot_position, instance in enumerate(gpu["mig_instances"]):
            if instance["index"] in seen_slots:
                pointer = f"/gpus/{position}/mig_instances/{slot_position}/index"
                raise FieldError(pointer, f"MIG device slot {instance['index']} appears twice on one GPU ({pointer}).")
            seen_slots.add(instance["index"])
        uuid = gpu["uuid"]
        if uuid is not None:
            if uuid in seen_uuids:
                pointer = f"/gpus/{position}/uuid"
                raise FieldError(pointer, f"GPU {uuid} appears twice in the report ({pointer}).")
            seen_uuids.add(uuid)


def report_out_of_order(state: StoredReportState, report: AgentReport) -> bool:
    """Not newer, by (agent_started_at, sequence), than the last report accepted, while the node is
    fresh: such a report is discarded. A stale node takes any report, so a reset clock cannot lock
    an agent out."""
    return (
        state.agent_started_at is not None
        and state.sequence is not None
        and not state.stale_on_receipt
        and (report_timestamp(report["agent_started_at"]), report["sequence"]) <= (state.agent_started_at, state.sequence)
    )


def mig_devices_needed(gpus: Sequence[StoredGpu], report: AgentReport) -> bool:
    """Whether ``report_changes`` looks at stored MIG devices: a reported GPU lists MIG devices, or
    had MIG enabled."""
    had_mig = {gpu.uuid for gpu in gpus if gpu.fields.mig_mode_current == "enabled"}
    return any(gpu["uuid"] is not None and (gpu["mig_instances"] or gpu["uuid"] in had_mig) for gpu in report["gpus"])


def mig_plan_gpu(report: AgentReport) -> tuple[str, int]:
    """The GPU model (NVML's name) and memory (MiB) a well-known mig-parted config is read for:
    those of the first GPU the report names."""
    named = next((gpu for gpu in report["gpus"] if gpu["name"]), None)
    gpu_model = (named["name"] or "") if named is not None else ""
    memory = named["memory_total_bytes"] if named is not None else None
    return gpu_model, (memory or 0) // (1024 * 1024)


def report_changes(
    stored: StoredNode,
    report: AgentReport,
    *,
    token_id: int,
    received_at: datetime.datetime,
    stale_after: datetime.timedelta,
) -> ChangeSet:
    """What an accepted report (``report_check`` passed, not out of order) changes: its rows
    (``report_rows``) and the node's audited part (``report_node_changes``), the MIG layout
    compared with ``stored.planned_mig``.

    It replaces what was known: observed GPUs are matched by UUID, GPUs missing from it are marked
    absent (a GPU reported without a UUID keeps its previous state and is flagged; a report whose
    GPU count failed changes no GPU's presence), MIG devices and the latest readings are written
    with one raw sample per GPU, the inventory is observed when it differs, and the MIG layout is
    compared with the plan. ``stale_after`` is how long after receipt the node goes stale.
    """
    rows, presence = report_rows(stored, report, received_at=received_at)
    node = report_node_changes(
        stored, report, presence, token_id=token_id, received_at=received_at, stale_after=stale_after
    )
    return ChangeSet(rows=rows, node=node)


def report_node_changes(
    stored: StoredNode,
    report: AgentReport,
    presence: GpuPresence,
    *,
    token_id: int,
    received_at: datetime.datetime,
    stale_after: datetime.timedelta,
) -> NodeChanges:
    """The node's audited part of a report: its audit events in order (GPU presence, the MIG
    flags compared with ``stored.planned_mig``, reports resumed) and the report state's new values.
    Decided once, after the rows: when the inventory changed, the caller reads the MIG plan again
    first (a plan the portal rendered is planned on the inventory's GPUs)."""
    state = stored.state
    comparison = _compare_mig(report, stored.planned_mig)
    events = (*_presence_events(state, presence), *_mig_flag_events(state, comparison), *_resumed_events(state))
    new_state = ReportStateUpdate(
        token_id=token_id,
        agent_version=report["agent_version"],
        agent_started_at=report_timestamp(report["agent_started_at"]),
        sequence=report["sequence"],
        collected_at=report_timestamp(report["collected_at"]),
        received_at=received_at,
        interval_seconds=report["interval_seconds"],
        stale_at=received_at + stale_after,
        undelivered_reports=min(report["undelivered_reports"], _MAX_INT),
        reports_accepted=state.reports_accepted + 1,
        driver_version=report["driver_version"] or "",
        cuda_driver_version=report["cuda_driver_version"] or "",
        errors=list(report["errors"]),
        is_stale=False,
        stale_since=None,
        mig_mismatch=comparison.mismatch,
        mig_reset_pending=bool(comparison.reset_pending),
        mig_detail=comparison.as_detail(),
        unidentified_gpus=presence.unidentified,
    )
    return NodeChanges(audit_events=events, state=new_state)


def inventory_relinks(
    links: Sequence[tuple[str, int | None]], inventory_rows: Mapping[str, int]
) -> list[tuple[str, int | None]]:
    """The observed GPUs (by UUID) to point at another inventory row, given the row
    ``node_gpus_observe`` returned for each observed UUID: their own, or none when theirs was taken
    over by another card."""
    claimed = set(inventory_rows.values())
    relinked: list[tuple[str, int | None]] = []
    for uuid, gpu_id in links:
        wanted = inventory_rows.get(uuid)
        if wanted is not None and gpu_id != wanted:
            relinked.append((uuid, wanted))
        elif wanted is None and gpu_id is not None and gpu_id in claimed:
            relinked.append((uuid, None))
    return relinked


# ---------------------------------------------------------------------------------- the parts


def _presence_events(state: StoredReportState, presence: GpuPresence) -> list[AuditEntry]:
    changed = presence.appeared or presence.returned or presence.gone
    if not changed and presence.unidentified == state.unidentified_gpus:
        return []
    return [
        AuditEntry(
            action=actions.NODE_GPUS_OBSERVED,
            target_node_id=state.node_id,
            before={"unidentified": state.unidentified_gpus},
            after={"unidentified": presence.unidentified},
            details={
                "appeared": list(presence.appeared),
                "returned": list(presence.returned),
                "absent": list(presence.gone),
            },
        )
    ]


def _mig_flag_events(state: StoredReportState, comparison: mig.MigComparison) -> list[AuditEntry]:
    detail = comparison.as_detail()
    return [
        AuditEntry(
            action=actions.NODE_MIG_MISMATCH_FLAGGED if now else actions.NODE_MIG_MISMATCH_CLEARED,
            target_node_id=state.node_id,
            before={flag: was, "detail": state.mig_detail},
            after={flag: now, "detail": detail},
            details={"flag": flag},
        )
        for flag, was, now in (
            ("mig_layout", state.mig_mismatch, comparison.mismatch),
            ("reset_pending", state.mig_reset_pending, bool(comparison.reset_pending)),
        )
        if was != now
    ]


def _resumed_events(state: StoredReportState) -> list[AuditEntry]:
    if not state.is_stale:
        return []
    return [
        AuditEntry(
            action=actions.NODE_REPORTS_RESUMED,
            target_node_id=state.node_id,
            before={"stale": True},
            after={"stale": False},
            details={"stale_since": state.stale_since.isoformat() if state.stale_since else None},
        )
    ]


def _compare_mig(report: AgentReport, plan: PlannedMig) -> mig.MigComparison:
    indexes = [gpu["index"] for gpu in report["gpus"]]
    observed = [
        mig.ObservedGpuMig(
            index=gpu["index"],
            mig_capable=mig_capable(gpu),
            current=gpu["mig_mode"]["current"] if gpu["mig_mode"] else None,
            pending=gpu["mig_mode"]["pending"] if gpu["mig_mode"] else None,
            profiles=tuple(instance["profile"] for instance in gpu["mig_instances"]),
        )
        for gpu in report["gpus"]
    ]
    planned = mig.planned_per_gpu(plan.entries, indexes) if plan.entries is not None else None
    return mig.mig_layout_compare(planned=planned, observed=observed, config_state=plan.config_state)

"""What one accepted report changes: a pure function of the stored state and the report.

``report_changes`` takes the node as ``telemetry.ingest.load`` read it (``stored.StoredNode``, plain
values) and a checked report, and returns a ``changeset.ChangeSet``: the observed GPUs to create
and update, their MIG devices to replace or update, the raw samples to insert, the inventory
observation to make, the audit events to write and the report state's new values. No ORM, no I/O,
no clock: the moment of receipt and the staleness window come in as arguments, and
``telemetry.ingest.write`` applies the result.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from agent.report import AgentReport, GpuReport, MigInstanceReport
from audit import actions
from clusters.inventory import ObservedGpuSpec, gpu_model_from_nvml_name
from kernel.errors import FieldError
from telemetry import mig
from telemetry.ingest.changeset import (
    AuditEntry,
    ChangeSet,
    GpuCreate,
    GpuUpdate,
    InventoryObservation,
    MigCreate,
    MigMemoryUpdate,
    NodeChanges,
    RawSample,
    ReportStateUpdate,
    RowChanges,
)
from telemetry.ingest.stored import (
    GPU_READING_FIELD_NAMES,
    GPU_STATE_FIELD_NAMES,
    GpuFields,
    MigDevice,
    PlannedMig,
    StoredGpu,
    StoredNode,
    StoredReportState,
)

_MAX_BIGINT = 2**63 - 1
_MAX_MIB = 2**31 - 1
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
        and (_timestamp(report["agent_started_at"]), report["sequence"]) <= (state.agent_started_at, state.sequence)
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
    """What an accepted report (``report_check`` passed, not out of order) changes.

    It replaces what was known: observed GPUs are matched by UUID, GPUs missing from it are marked
    absent (a GPU reported without a UUID keeps its previous state and is flagged; a report whose
    GPU count failed changes no GPU's presence), MIG devices and the latest readings are written
    with one raw sample per GPU, the inventory is observed when it differs, and the MIG layout is
    compared with the plan. ``stale_after`` is how long after receipt the node goes stale.
    """
    state = stored.state
    observed = {gpu.uuid: gpu for gpu in stored.gpus}
    identified = [(gpu, gpu["uuid"]) for gpu in report["gpus"] if gpu["uuid"] is not None]
    unidentified = sorted(gpu["index"] for gpu in report["gpus"] if gpu["uuid"] is None)
    specs = [_spec(gpu, uuid) for gpu, uuid in identified]
    had_mig = {uuid for uuid, row in observed.items() if row.fields.mig_mode_current == "enabled"}

    created: list[GpuCreate] = []
    updated: list[GpuUpdate] = []
    returned: list[dict[str, Any]] = []
    gone: list[dict[str, Any]] = []
    state_changed = False
    reported: list[tuple[str, int | None, GpuFields, GpuReport]] = []  # uuid, stored pk, new fields, report
    for gpu, uuid in identified:
        row = observed.get(uuid)
        new = _fields(gpu, received_at, row.fields if row is not None else None)
        if row is None:
            created.append(GpuCreate(uuid=uuid, first_seen_at=received_at, fields=new))
        else:
            updated.append(GpuUpdate(pk=row.pk, uuid=uuid, fields=new))
            state_changed = state_changed or _state_of(new) != _state_of(row.fields)
            if not row.fields.is_present:
                returned.append(_gpu_ref(uuid, row.fields.index))
        reported.append((uuid, row.pk if row is not None else None, new, gpu))
    appeared = [_gpu_ref(item.uuid, item.fields.index) for item in created]
    reported_uuids = {uuid for _, uuid in identified}
    # When NVML could not count the GPUs the report lists none: that says nothing about presence.
    count_failed = any(error["field"] == "gpus" for error in report["errors"])
    for uuid, row in observed.items():
        if uuid not in reported_uuids and row.fields.is_present and row.fields.index not in unidentified and not count_failed:
            gone.append(_gpu_ref(uuid, row.fields.index))
            absent = dataclasses.replace(row.fields, is_present=False, absent_since=received_at)
            updated.append(GpuUpdate(pk=row.pk, uuid=uuid, fields=absent))
            state_changed = True

    mig_replaced_on: list[int] = []
    mig_created: list[MigCreate] = []
    mig_memory: list[MigMemoryUpdate] = []
    for uuid, pk, _, gpu in reported:
        if not gpu["mig_instances"] and uuid not in had_mig:
            continue
        wanted = [_mig_device(instance) for instance in gpu["mig_instances"]]
        have = stored.mig_devices.get(pk, ()) if pk is not None else ()
        in_slot_order = sorted(wanted, key=lambda device: device.slot)
        if len(have) == len(wanted) and all(
            kept.structure() == sent.structure() for kept, sent in zip(have, in_slot_order, strict=True)
        ):
            for kept, sent in zip(have, in_slot_order, strict=True):
                if kept.memory_used_bytes != sent.memory_used_bytes and kept.pk is not None:
                    mig_memory.append(MigMemoryUpdate(pk=kept.pk, memory_used_bytes=sent.memory_used_bytes))
        else:
            if have and pk is not None:
                mig_replaced_on.append(pk)
            mig_created.extend(MigCreate(gpu_uuid=uuid, device=device) for device in wanted)

    collected = _timestamp(report["collected_at"])
    sample_at = min(collected, received_at)  # an agent clock running ahead cannot write the future
    samples = tuple(_sample(uuid, fields, sample_at) for uuid, _, fields, _ in reported)

    inventory = None
    if _inventory_differs(specs, observed):
        links = [(uuid, row.fields.gpu_id) for uuid, row in observed.items()]
        inventory = InventoryObservation(specs=tuple(specs), links=(*links, *((item.uuid, None) for item in created)))

    rows = RowChanges(
        stored_pks={uuid: row.pk for uuid, row in observed.items()},
        gpus_created=tuple(created), gpus_updated=tuple(updated), gpu_state_changed=state_changed,
        mig_replaced_on=tuple(mig_replaced_on), mig_created=tuple(mig_created), mig_memory_updates=tuple(mig_memory),
        samples=samples, inventory=inventory, unchanged_readings=_unchanged_readings(updated, observed),
    )  # fmt: skip

    events: list[AuditEntry] = []
    if appeared or returned or gone or unidentified != state.unidentified_gpus:
        events.append(
            AuditEntry(
                action=actions.NODE_GPUS_OBSERVED,
                target_node_id=state.node_id,
                before={"unidentified": state.unidentified_gpus},
                after={"unidentified": unidentified},
                details={"appeared": appeared, "returned": returned, "absent": gone},
            )
        )
    comparison = _compare_mig(report, stored.planned_mig)
    detail = comparison.as_detail()
    for flag, was, now in (
        ("mig_layout", state.mig_mismatch, comparison.mismatch),
        ("reset_pending", state.mig_reset_pending, bool(comparison.reset_pending)),
    ):
        if was != now:
            events.append(
                AuditEntry(
                    action=actions.NODE_MIG_MISMATCH_FLAGGED if now else actions.NODE_MIG_MISMATCH_CLEARED,
                    target_node_id=state.node_id,
                    before={flag: was, "detail": state.mig_detail},
                    after={flag: now, "detail": detail},
                    details={"flag": flag},
                )
            )
    if state.is_stale:
        events.append(
            AuditEntry(
                action=actions.NODE_REPORTS_RESUMED,
                target_node_id=state.node_id,
                before={"stale": True},
                after={"stale": False},
                details={"stale_since": state.stale_since.isoformat() if state.stale_since else None},
            )
        )
    new_state = ReportStateUpdate(
        token_id=token_id,
        agent_version=report["agent_version"],
        agent_started_at=_timestamp(report["agent_started_at"]),
        sequence=report["sequence"],
        collected_at=collected,
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
        mig_detail=detail,
        unidentified_gpus=unidentified,
    )
    return ChangeSet(rows=rows, node=NodeChanges(audit_events=tuple(events), state=new_state))


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


def _timestamp(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


def _bytes(value: int | None) -> int | None:
    return None if value is None else min(value, _MAX_BIGINT)


def _mig_capable(gpu: GpuReport) -> bool | None:
    if gpu["mig_mode"] is not None:
        return True
    return False if "mig_mode" in gpu["unsupported"] else None


def _spec(gpu: GpuReport, uuid: str) -> ObservedGpuSpec:
    memory = gpu["memory_total_bytes"]
    memory_mib = memory // (1024 * 1024) if memory is not None else None
    return ObservedGpuSpec(
        index=gpu["index"],
        uuid=uuid,
        model=gpu_model_from_nvml_name(gpu["name"]) if gpu["name"] else None,
        memory_mib=memory_mib if memory_mib is not None and memory_mib <= _MAX_MIB else None,
        mig_capable=_mig_capable(gpu),
    )


def _inventory_differs(specs: list[ObservedGpuSpec], observed: Mapping[str, StoredGpu]) -> bool:
    for spec in specs:
        row = observed.get(spec.uuid)
        gpu = row.inventory if row is not None else None
        if gpu is None or gpu.uuid != spec.uuid or gpu.index != spec.index:
            return True
        if (spec.model and gpu.model != spec.model) or (spec.memory_mib is not None and gpu.memory_mib != spec.memory_mib):
            return True
        if spec.mig_capable is not None and gpu.mig_capable != spec.mig_capable:
            return True
    return False


def _state_of(fields: GpuFields) -> tuple[Any, ...]:
    return tuple(getattr(fields, name) for name in GPU_STATE_FIELD_NAMES)


def _unchanged_readings(updated: Sequence[GpuUpdate], observed: Mapping[str, StoredGpu]) -> frozenset[str]:
    return frozenset(
        name
        for name in GPU_READING_FIELD_NAMES
        if all(getattr(item.fields, name) == getattr(observed[item.uuid].fields, name) for item in updated)
    )


def _fields(gpu: GpuReport, now: datetime.datetime, before: GpuFields | None) -> GpuFields:
    """The observed GPU as the report says; its inventory link and (when the report has none) its
    name stay what they were."""
    utilization = gpu["utilization"]
    mig_mode = gpu["mig_mode"]
    return GpuFields(
        gpu_id=before.gpu_id if before is not None else None,
        index=gpu["index"],
        name=gpu["name"] or (before.name if before is not None else ""),
        is_present=True,
        absent_since=None,
        memory_total_bytes=_bytes(gpu["memory_total_bytes"]),
        mig_mode_current=mig_mode["current"] if mig_mode else "",
        mig_mode_pending=mig_mode["pending"] if mig_mode else "",
        power_limit_milliwatts=gpu["power_limit_milliwatts"],
        ecc_errors=dict(gpu["ecc_errors"]) if gpu["ecc_errors"] is not None else None,
        unsupported=list(gpu["unsupported"]),
        errors=list(gpu["errors"]),
        last_seen_at=now,
        memory_used_bytes=_bytes(gpu["memory_used_bytes"]),
        gpu_percent=utilization["gpu_percent"] if utilization else None,
        memory_percent=utilization["memory_percent"] if utilization else None,
        temperature_celsius=gpu["temperature_celsius"],
        power_usage_milliwatts=gpu["power_usage_milliwatts"],
        processes=list(gpu["processes"]) if gpu["processes"] is not None else None,
    )


def _gpu_ref(uuid: str, index: int) -> dict[str, Any]:
    return {"uuid": uuid, "index": index}


def _mig_device(instance: MigInstanceReport) -> MigDevice:
    return MigDevice(
        slot=instance["index"], uuid=instance["uuid"] or "", profile=instance["profile"] or "",
        gpu_instance_id=instance["gpu_instance_id"], compute_instance_id=instance["compute_instance_id"],
        gpu_instance_slices=instance["gpu_instance_slices"], compute_instance_slices=instance["compute_instance_slices"],
        multiprocessor_count=instance["multiprocessor_count"],
        memory_total_bytes=_bytes(instance["memory_total_bytes"]),
        memory_used_bytes=_bytes(instance["memory_used_bytes"]),
    )  # fmt: skip


def _sample(uuid: str, fields: GpuFields, at: datetime.datetime) -> RawSample:
    return RawSample(
        gpu_uuid=uuid, at=at, gpu_percent=fields.gpu_percent, memory_percent=fields.memory_percent,
        memory_used_bytes=fields.memory_used_bytes, temperature_celsius=fields.temperature_celsius,
        power_milliwatts=fields.power_usage_milliwatts,
    )  # fmt: skip


def _compare_mig(report: AgentReport, plan: PlannedMig) -> mig.MigComparison:
    indexes = [gpu["index"] for gpu in report["gpus"]]
    observed = [
        mig.ObservedGpuMig(
            index=gpu["index"],
            mig_capable=_mig_capable(gpu),
            current=gpu["mig_mode"]["current"] if gpu["mig_mode"] else None,
            pending=gpu["mig_mode"]["pending"] if gpu["mig_mode"] else None,
            profiles=tuple(instance["profile"] for instance in gpu["mig_instances"]),
        )
        for gpu in report["gpus"]
    ]
    planned = mig.planned_per_gpu(plan.entries, indexes) if plan.entries is not None else None
    return mig.mig_layout_compare(planned=planned, observed=observed, config_state=plan.config_state)

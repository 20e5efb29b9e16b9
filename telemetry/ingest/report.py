"""The node agent's report, stored (``node_report_ingest``).

A report that changes the inventory, GPU presence or a MIG flag, or brings a stale node back,
writes its audit events in the same transaction. A report that changes nothing but readings
writes no event (they are samples, not decisions), so the hot path never takes the audit chain's
lock.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import F

from agent.report import AgentReport, GpuReport
from audit import actions
from audit.services import audit_record
from clusters import inventory
from clusters.models import Node
from kernel.errors import ApplicationError, FieldError
from telemetry import conf, mig
from telemetry.ingest.sql import insert_rows_ignoring_conflicts, update_rows
from telemetry.models import (
    GpuSample,
    NodeReportState,
    NodeToken,
    ObservedGpu,
    ObservedMigInstance,
    SampleTier,
)
from telemetry.node_tokens import node_token_touch
from telemetry.selectors import node_planned_mig

_MAX_BIGINT = 2**63 - 1
_MAX_MIB = 2**31 - 1


@dataclass(frozen=True)
class ReportOutcome:
    accepted: bool
    reason: str  # accepted | out_of_order
    stale_at: datetime.datetime | None


def report_check(*, report: AgentReport) -> None:
    """What the schema cannot say: UUIDs and indexes are unique among a report's GPUs."""
    seen_uuids: set[str] = set()
    seen_indexes: set[int] = set()
    for position, gpu in enumerate(report["gpus"]):
        if gpu["index"] in seen_indexes:
            pointer = f"/gpus/{position}/index"
            raise FieldError(pointer, f"GPU index {gpu['index']} appears twice in the report ({pointer}).")
        seen_indexes.add(gpu["index"])
        uuid = gpu["uuid"]
        if uuid is not None:
            if uuid in seen_uuids:
                pointer = f"/gpus/{position}/uuid"
                raise FieldError(pointer, f"GPU {uuid} appears twice in the report ({pointer}).")
            seen_uuids.add(uuid)


def _timestamp(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


def _bytes(value: int | None) -> int | None:
    return None if value is None else min(value, _MAX_BIGINT)


def _mig_capable(gpu: GpuReport) -> bool | None:
    if gpu["mig_mode"] is not None:
        return True
    return False if "mig_mode" in gpu["unsupported"] else None


def _spec(gpu: GpuReport, uuid: str) -> inventory.ObservedGpuSpec:
    memory = gpu["memory_total_bytes"]
    memory_mib = memory // (1024 * 1024) if memory is not None else None
    return inventory.ObservedGpuSpec(
        index=gpu["index"],
        uuid=uuid,
        model=inventory.gpu_model_from_nvml_name(gpu["name"]) if gpu["name"] else None,
        memory_mib=memory_mib if memory_mib is not None and memory_mib <= _MAX_MIB else None,
        mig_capable=_mig_capable(gpu),
    )


def _inventory_differs(specs: list[inventory.ObservedGpuSpec], observed: dict[str, ObservedGpu]) -> bool:
    for spec in specs:
        row = observed.get(spec.uuid)
        gpu = row.gpu if row is not None else None
        if gpu is None or gpu.uuid != spec.uuid or gpu.index != spec.index:
            return True
        if (spec.model and gpu.model != spec.model) or (spec.memory_mib is not None and gpu.memory_mib != spec.memory_mib):
            return True
        if spec.mig_capable is not None and gpu.mig_capable != spec.mig_capable:
            return True
    return False


# What changes from one report to the next, written every time ...
_READING_FIELDS = [
    "last_seen_at", "memory_used_bytes", "gpu_percent", "memory_percent", "temperature_celsius",
    "power_usage_milliwatts", "processes",
]  # fmt: skip
# ... and what seldom does, written only when it did on one of the node's GPUs.
_STATE_FIELDS = [
    "gpu", "index", "name", "is_present", "absent_since", "memory_total_bytes", "mig_mode_current",
    "mig_mode_pending", "power_limit_milliwatts", "ecc_errors", "unsupported", "errors",
]  # fmt: skip


def _state_of(row: ObservedGpu) -> tuple[Any, ...]:
    return tuple(getattr(row, "gpu_id" if name == "gpu" else name) for name in _STATE_FIELDS)


_SAMPLE_FIELDS = [
    "gpu", "tier", "at", "samples", "gpu_percent", "memory_percent", "memory_used_bytes", "temperature_celsius",
    "power_milliwatts",
]  # fmt: skip


def _fill(row: ObservedGpu, gpu: GpuReport, now: datetime.datetime) -> None:
    utilization = gpu["utilization"]
    mig_mode = gpu["mig_mode"]
    row.index = gpu["index"]
    row.name = gpu["name"] or row.name
    row.is_present = True
    row.last_seen_at = now
    row.absent_since = None
    row.memory_total_bytes = _bytes(gpu["memory_total_bytes"])
    row.memory_used_bytes = _bytes(gpu["memory_used_bytes"])
    row.mig_mode_current = mig_mode["current"] if mig_mode else ""
    row.mig_mode_pending = mig_mode["pending"] if mig_mode else ""
    row.gpu_percent = utilization["gpu_percent"] if utilization else None
    row.memory_percent = utilization["memory_percent"] if utilization else None
    row.temperature_celsius = gpu["temperature_celsius"]
    row.power_usage_milliwatts = gpu["power_usage_milliwatts"]
    row.power_limit_milliwatts = gpu["power_limit_milliwatts"]
    row.ecc_errors = dict(gpu["ecc_errors"]) if gpu["ecc_errors"] is not None else None
    row.processes = list(gpu["processes"]) if gpu["processes"] is not None else None
    row.unsupported = list(gpu["unsupported"])
    row.errors = list(gpu["errors"])


def _sample(row: ObservedGpu, at: datetime.datetime) -> GpuSample:
    return GpuSample(
        gpu=row, tier=SampleTier.RAW, at=at, samples=1,
        gpu_percent=row.gpu_percent, memory_percent=row.memory_percent,
        memory_used_bytes=row.memory_used_bytes, temperature_celsius=row.temperature_celsius,
        power_milliwatts=row.power_usage_milliwatts,
    )  # fmt: skip


_MIG_STRUCTURE = [
    "uuid", "profile", "gpu_instance_id", "compute_instance_id", "gpu_instance_slices", "compute_instance_slices",
    "multiprocessor_count", "memory_total_bytes",
]  # fmt: skip


def _mig_rows(row: ObservedGpu, gpu: GpuReport) -> list[ObservedMigInstance]:
    return [
        ObservedMigInstance(
            gpu=row, slot=instance["index"], uuid=instance["uuid"] or "", profile=instance["profile"] or "",
            gpu_instance_id=instance["gpu_instance_id"], compute_instance_id=instance["compute_instance_id"],
            gpu_instance_slices=instance["gpu_instance_slices"],
            compute_instance_slices=instance["compute_instance_slices"],
            multiprocessor_count=instance["multiprocessor_count"],
            memory_total_bytes=_bytes(instance["memory_total_bytes"]),
            memory_used_bytes=_bytes(instance["memory_used_bytes"]),
        )
        for instance in gpu["mig_instances"]
    ]  # fmt: skip


def _sync_mig_instances(pairs: list[tuple[ObservedGpu, GpuReport]]) -> None:
    """Make each GPU's MIG devices the reported ones: update memory in place when the devices are
    the same, replace them when the layout changed."""
    existing: dict[int, list[ObservedMigInstance]] = {}
    for instance in ObservedMigInstance.objects.filter(gpu__in=[row for row, _ in pairs]).order_by("gpu_id", "slot"):
        existing.setdefault(instance.gpu_id, []).append(instance)
    replace_on: list[int] = []
    created: list[ObservedMigInstance] = []
    updated: list[ObservedMigInstance] = []
    for row, gpu in pairs:
        wanted = _mig_rows(row, gpu)
        have = existing.get(row.pk, [])
        same = len(have) == len(wanted) and all(
            old.slot == new.slot and all(getattr(old, name) == getattr(new, name) for name in _MIG_STRUCTURE)
            for old, new in zip(have, sorted(wanted, key=lambda instance: instance.slot), strict=True)
        )
        if same:
            for old, new in zip(have, sorted(wanted, key=lambda instance: instance.slot), strict=True):
                if old.memory_used_bytes != new.memory_used_bytes:
                    old.memory_used_bytes = new.memory_used_bytes
                    updated.append(old)
        else:
            if have:
                replace_on.append(row.pk)
            created.extend(wanted)
    if replace_on:
        ObservedMigInstance.objects.filter(gpu_id__in=replace_on).delete()
    if created:
        ObservedMigInstance.objects.bulk_create(created)
    if updated:
        update_rows(updated, ["memory_used_bytes"])


def _compare_mig(node: Node, report: AgentReport) -> mig.MigComparison:
    named = next((gpu for gpu in report["gpus"] if gpu["name"]), None)
    gpu_model = (named["name"] or "") if named is not None else ""
    memory = named["memory_total_bytes"] if named is not None else None
    entries, config_state = node_planned_mig(node=node, gpu_model=gpu_model, memory_mib=(memory or 0) // (1024 * 1024))
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
    planned = mig.planned_per_gpu(entries, indexes) if entries is not None else None
    return mig.mig_layout_compare(planned=planned, observed=observed, config_state=config_state)


def _audit_mig_flags(state: NodeReportState, node: Node, comparison: mig.MigComparison) -> None:
    detail = comparison.as_detail()
    for flag, was, now in (
        ("mig_layout", state.mig_mismatch, comparison.mismatch),
        ("reset_pending", state.mig_reset_pending, bool(comparison.reset_pending)),
    ):
        if was != now:
            audit_record(
                actor=None,
                action=actions.NODE_MIG_MISMATCH_FLAGGED if now else actions.NODE_MIG_MISMATCH_CLEARED,
                target=node,
                before={flag: was, "detail": state.mig_detail},
                after={flag: now, "detail": detail},
                details={"flag": flag},
            )
    state.mig_mismatch = comparison.mismatch
    state.mig_reset_pending = bool(comparison.reset_pending)
    state.mig_detail = detail


def _gpu_ref(row: ObservedGpu) -> dict[str, Any]:
    return {"uuid": row.uuid, "index": row.index}


class UnknownNode(ApplicationError):
    status = 404
    code = "node_unknown"


def _state_for_update(*, cluster_id: int, node_name: str) -> NodeReportState:
    """The node's report state, locked, with its node; created on the node's first report."""
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


@transaction.atomic
def node_report_ingest(
    *, token: NodeToken, node_name: str, report: AgentReport, received_at: datetime.datetime
) -> ReportOutcome:
    """Store one checked report (schema-valid, ``report_check`` passed) of the token's cluster's
    node ``node_name`` (404 when the inventory has no such node).

    A report not newer, by (agent_started_at, sequence), than the last one accepted is counted and
    discarded while the node is fresh (a stale node takes any report, so a reset clock cannot lock
    an agent out). Otherwise it replaces what was known: inventory GPUs are matched by UUID, GPUs
    missing from it are marked absent (a GPU reported without a UUID keeps its previous state and
    is flagged), MIG devices, the latest readings and one raw sample per GPU are written, and the
    MIG layout is compared with the plan.
    """
    state = _state_for_update(cluster_id=token.cluster_id, node_name=node_name)
    node = state.node
    node_token_touch(token=token, now=received_at)
    started = _timestamp(report["agent_started_at"])
    if (
        state.agent_started_at is not None
        and state.sequence is not None
        and not state.is_stale_at(received_at)
        and (started, report["sequence"]) <= (state.agent_started_at, state.sequence)
    ):
        NodeReportState.objects.filter(pk=state.pk).update(reports_discarded=F("reports_discarded") + 1)
        return ReportOutcome(accepted=False, reason="out_of_order", stale_at=state.stale_at)

    observed = {row.uuid: row for row in ObservedGpu.objects.filter(node=node).select_related("gpu").order_by()}
    identified = [(gpu, gpu["uuid"]) for gpu in report["gpus"] if gpu["uuid"] is not None]
    unidentified = sorted(gpu["index"] for gpu in report["gpus"] if gpu["uuid"] is None)
    specs = [_spec(gpu, uuid) for gpu, uuid in identified]

    had_mig = {uuid for uuid, row in observed.items() if row.mig_mode_current == "enabled"}
    before: dict[str, tuple[Any, ...]] = {}
    created: list[ObservedGpu] = []
    changed: list[ObservedGpu] = []
    appeared: list[dict[str, Any]] = []
    returned: list[dict[str, Any]] = []
    gone: list[dict[str, Any]] = []
    reported_pairs: list[tuple[ObservedGpu, GpuReport]] = []
    for gpu, uuid in identified:
        row = observed.get(uuid)
        if row is None:
            row = ObservedGpu(node=node, uuid=uuid, first_seen_at=received_at, last_seen_at=received_at, index=gpu["index"])
            created.append(row)
        else:
            changed.append(row)
            before[uuid] = _state_of(row)
            if not row.is_present:
                returned.append(_gpu_ref(row))
        _fill(row, gpu, received_at)
        reported_pairs.append((row, gpu))
    appeared = [_gpu_ref(row) for row in created]
    reported = {uuid for _, uuid in identified}
    # When NVML could not count the GPUs the report lists none: that says nothing about presence.
    count_failed = any(error["field"] == "gpus" for error in report["errors"])
    for uuid, row in observed.items():
        if uuid not in reported and row.is_present and row.index not in unidentified and not count_failed:
            row.is_present = False
            row.absent_since = received_at
            gone.append(_gpu_ref(row))
            changed.append(row)
    if created:
        ObservedGpu.objects.bulk_create(created)
    if any(row.uuid not in before or before[row.uuid] != _state_of(row) for row in changed):
        update_rows(changed, _READING_FIELDS + _STATE_FIELDS)
    elif changed:
        update_rows(changed, _READING_FIELDS)

    with_mig = [(row, gpu) for row, gpu in reported_pairs if gpu["mig_instances"] or row.uuid in had_mig]
    if with_mig:
        _sync_mig_instances(with_mig)

    collected = _timestamp(report["collected_at"])
    sample_at = min(collected, received_at)  # an agent clock running ahead cannot write the future
    insert_rows_ignoring_conflicts([_sample(row, sample_at) for row, _ in reported_pairs], _SAMPLE_FIELDS)

    # Audited steps last: the audit chain's lock is held from the first event to the commit.
    if _inventory_differs(specs, observed):
        _inventory_observe(node, specs, {**observed, **{row.uuid: row for row in created}})
    if appeared or returned or gone or unidentified != state.unidentified_gpus:
        audit_record(
            actor=None,
            action=actions.NODE_GPUS_OBSERVED,
            target=node,
            before={"unidentified": state.unidentified_gpus},
            after={"unidentified": unidentified},
            details={"appeared": appeared, "returned": returned, "absent": gone},
        )
    _audit_mig_flags(state, node, _compare_mig(node, report))
    if state.is_stale:
        audit_record(
            actor=None,
            action=actions.NODE_REPORTS_RESUMED,
            target=node,
            before={"stale": True},
            after={"stale": False},
            details={"stale_since": state.stale_since.isoformat() if state.stale_since else None},
        )
    _update_state(state, token=token, report=report, started=started, collected=collected, received_at=received_at)
    state.unidentified_gpus = unidentified
    state.save()
    return ReportOutcome(accepted=True, reason="accepted", stale_at=state.stale_at)


def _inventory_observe(node: Node, specs: list[inventory.ObservedGpuSpec], rows: dict[str, ObservedGpu]) -> None:
    """Update the inventory's GPUs (audited there) and point each observed GPU at its row; a GPU
    whose row was taken over by another card is no longer linked."""
    inventory_rows = inventory.node_gpus_observe(node=node, gpus=specs)
    claimed = {gpu.pk for gpu in inventory_rows.values()}
    relinked = []
    for uuid, row in rows.items():
        wanted = inventory_rows.get(uuid)
        if wanted is not None and row.gpu_id != wanted.pk:
            row.gpu = wanted
            relinked.append(row)
        elif wanted is None and row.gpu_id is not None and row.gpu_id in claimed:
            row.gpu = None
            relinked.append(row)
    update_rows(relinked, ["gpu"])


def _update_state(
    state: NodeReportState,
    *,
    token: NodeToken,
    report: AgentReport,
    started: datetime.datetime,
    collected: datetime.datetime,
    received_at: datetime.datetime,
) -> None:
    state.token = token
    state.agent_version = report["agent_version"]
    state.agent_started_at = started
    state.sequence = report["sequence"]
    state.collected_at = collected
    state.received_at = received_at
    state.interval_seconds = report["interval_seconds"]
    state.stale_at = received_at + conf.stale_after(report["interval_seconds"])
    state.undelivered_reports = min(report["undelivered_reports"], 2**31 - 1)
    state.reports_accepted += 1
    state.driver_version = report["driver_version"] or ""
    state.cuda_driver_version = report["cuda_driver_version"] or ""
    state.errors = list(report["errors"])
    state.is_stale = False
    state.stale_since = None

"""The rows one accepted report changes (``report_rows``): a pure function of the stored state and
the report, the first step of ``changes.report_changes``.

The observed GPUs to create and update, their MIG devices to replace or update, the raw samples to
insert and the inventory observation to make, with what the report says of the GPUs' presence
(``GpuPresence``, which the node's audited part records). No ORM, no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.report import AgentReport, GpuReport, MigInstanceReport
from clusters.inventory import ObservedGpuSpec, gpu_model_from_nvml_name
from telemetry.ingest.changeset import (
    GpuCreate,
    GpuUpdate,
    InventoryObservation,
    MigCreate,
    MigMemoryUpdate,
    RawSample,
    RowChanges,
)
from telemetry.ingest.stored import (
    GPU_READING_FIELD_NAMES,
    GPU_STATE_FIELD_NAMES,
    GpuFields,
    MigDevice,
    StoredGpu,
    StoredNode,
)

_MAX_BIGINT = 2**63 - 1
_MAX_MIB = 2**31 - 1


@dataclass(frozen=True)
class GpuPresence:
    """What a report says of which GPUs are there, for the node's audit event: GPUs seen for the
    first time, back after being absent, gone absent, and the indexes reported without a UUID."""

    appeared: tuple[dict[str, Any], ...]
    returned: tuple[dict[str, Any], ...]
    gone: tuple[dict[str, Any], ...]
    unidentified: list[int]


@dataclass(frozen=True)
class _ReportedGpu:
    uuid: str
    pk: int | None  # None: not stored yet
    fields: GpuFields  # as the report has them now
    report: GpuReport


@dataclass(frozen=True)
class _GpuRows:
    created: tuple[GpuCreate, ...]
    updated: tuple[GpuUpdate, ...]  # every reported GPU already stored, then the ones gone absent
    state_changed: bool
    reported: tuple[_ReportedGpu, ...]
    presence: GpuPresence


def report_rows(
    stored: StoredNode, report: AgentReport, *, received_at: datetime.datetime
) -> tuple[RowChanges, GpuPresence]:
    """The observed state's rows a report changes, and what it says of the GPUs' presence (which
    ``report_node_changes`` audits)."""
    observed = {gpu.uuid: gpu for gpu in stored.gpus}
    gpus = _gpu_rows(observed, report, received_at)
    mig_replaced_on, mig_created, mig_memory = _mig_rows(stored, gpus.reported)
    # An agent clock running ahead cannot write the future.
    sample_at = min(report_timestamp(report["collected_at"]), received_at)
    rows = RowChanges(
        stored_pks={uuid: row.pk for uuid, row in observed.items()},
        gpus_created=gpus.created, gpus_updated=gpus.updated, gpu_state_changed=gpus.state_changed,
        mig_replaced_on=mig_replaced_on, mig_created=mig_created, mig_memory_updates=mig_memory,
        samples=tuple(_sample(gpu.uuid, gpu.fields, sample_at) for gpu in gpus.reported),
        inventory=_inventory_observation(report, observed, gpus.created),
        unchanged_readings=_unchanged_readings(gpus.updated, observed),
    )  # fmt: skip
    return rows, gpus.presence


# ---------------------------------------------------------------------------------- the parts


def _gpu_rows(observed: Mapping[str, StoredGpu], report: AgentReport, received_at: datetime.datetime) -> _GpuRows:
    """The reported GPUs, created or updated, then the stored ones gone absent."""
    unidentified = sorted(gpu["index"] for gpu in report["gpus"] if gpu["uuid"] is None)
    reported = tuple(_reported(observed, gpu, received_at) for gpu in report["gpus"] if gpu["uuid"] is not None)
    created = tuple(
        GpuCreate(uuid=gpu.uuid, first_seen_at=received_at, fields=gpu.fields) for gpu in reported if gpu.pk is None
    )
    updated = [GpuUpdate(pk=gpu.pk, uuid=gpu.uuid, fields=gpu.fields) for gpu in reported if gpu.pk is not None]
    returned = tuple(
        _gpu_ref(item.uuid, observed[item.uuid].fields.index)
        for item in updated
        if not observed[item.uuid].fields.is_present
    )
    state_changed = any(_state_of(item.fields) != _state_of(observed[item.uuid].fields) for item in updated)
    absent = _gone_absent(observed, report, {gpu.uuid for gpu in reported}, unidentified, received_at)
    presence = GpuPresence(
        appeared=tuple(_gpu_ref(item.uuid, item.fields.index) for item in created),
        returned=returned,
        gone=tuple(_gpu_ref(item.uuid, item.fields.index) for item in absent),
        unidentified=unidentified,
    )
    return _GpuRows(created, (*updated, *absent), state_changed or bool(absent), reported, presence)


def _reported(observed: Mapping[str, StoredGpu], gpu: GpuReport, received_at: datetime.datetime) -> _ReportedGpu:
    uuid = gpu["uuid"]
    assert uuid is not None
    row = observed.get(uuid)
    fields = _fields(gpu, received_at, row.fields if row is not None else None)
    return _ReportedGpu(uuid=uuid, pk=row.pk if row is not None else None, fields=fields, report=gpu)


def _gone_absent(
    observed: Mapping[str, StoredGpu],
    report: AgentReport,
    reported_uuids: set[str],
    unidentified: list[int],
    received_at: datetime.datetime,
) -> list[GpuUpdate]:
    """The stored GPUs present until now that the report leaves out, marked absent: none when NVML
    could not count the GPUs (the report lists none: that says nothing about presence), and not
    one at an index a GPU without a UUID was reported at."""
    if any(error["field"] == "gpus" for error in report["errors"]):
        return []
    return [
        GpuUpdate(pk=row.pk, uuid=uuid, fields=dataclasses.replace(row.fields, is_present=False, absent_since=received_at))
        for uuid, row in observed.items()
        if uuid not in reported_uuids and row.fields.is_present and row.fields.index not in unidentified
    ]


def _mig_rows(
    stored: StoredNode, reported: Sequence[_ReportedGpu]
) -> tuple[tuple[int, ...], tuple[MigCreate, ...], tuple[MigMemoryUpdate, ...]]:
    """The observed GPUs whose MIG devices are replaced, the devices created, and the memory
    readings of devices that stay: a GPU that lists MIG devices, or had MIG enabled, is looked at."""
    had_mig = {gpu.uuid for gpu in stored.gpus if gpu.fields.mig_mode_current == "enabled"}
    replaced_on: list[int] = []
    created: list[MigCreate] = []
    memory: list[MigMemoryUpdate] = []
    for gpu in reported:
        if not gpu.report["mig_instances"] and gpu.uuid not in had_mig:
            continue
        wanted = [_mig_device(instance) for instance in gpu.report["mig_instances"]]
        have = stored.mig_devices.get(gpu.pk, ()) if gpu.pk is not None else ()
        in_slot_order = sorted(wanted, key=lambda device: device.slot)
        if _same_mig_structure(have, in_slot_order):
            memory.extend(
                MigMemoryUpdate(pk=kept.pk, memory_used_bytes=sent.memory_used_bytes)
                for kept, sent in zip(have, in_slot_order, strict=True)
                if kept.memory_used_bytes != sent.memory_used_bytes and kept.pk is not None
            )
        else:
            if have and gpu.pk is not None:
                replaced_on.append(gpu.pk)
            created.extend(MigCreate(gpu_uuid=gpu.uuid, device=device) for device in wanted)
    return tuple(replaced_on), tuple(created), tuple(memory)


def _same_mig_structure(have: Sequence[MigDevice], wanted: Sequence[MigDevice]) -> bool:
    return len(have) == len(wanted) and all(
        kept.structure() == sent.structure() for kept, sent in zip(have, wanted, strict=True)
    )


def _inventory_observation(
    report: AgentReport, observed: Mapping[str, StoredGpu], created: Sequence[GpuCreate]
) -> InventoryObservation | None:
    """What to observe of the inventory; None when it already says what the report does."""
    specs = [_spec(gpu, gpu["uuid"]) for gpu in report["gpus"] if gpu["uuid"] is not None]
    if not _inventory_differs(specs, observed):
        return None
    links = [(uuid, row.fields.gpu_id) for uuid, row in observed.items()]
    return InventoryObservation(specs=tuple(specs), links=(*links, *((item.uuid, None) for item in created)))


def report_timestamp(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


def _bytes(value: int | None) -> int | None:
    return None if value is None else min(value, _MAX_BIGINT)


def mig_capable(gpu: GpuReport) -> bool | None:
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
        mig_capable=mig_capable(gpu),
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

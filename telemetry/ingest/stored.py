"""What the ingest of one report reads of the stored state, as plain values (no Django).

``telemetry.ingest.load`` reads these from the database; ``telemetry.ingest.changes`` decides from
them and the report what to write. Field names are the models' attribute names (``gpu_id``, not
``gpu``), so the write step can hand them to the database as they are.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class InventoryGpu:
    """The inventory row (``clusters.Gpu``) an observed GPU is linked to, as far as a report is
    compared with it."""

    pk: int
    uuid: str
    index: int
    model: str
    memory_mib: int
    mig_capable: bool


@dataclass(frozen=True)
class GpuFields:
    """The columns of an observed GPU (``ObservedGpu``) that a report writes. The first group is its
    state, which seldom changes; the second its readings, written on every report."""

    gpu_id: int | None  # the inventory row
    index: int
    name: str
    is_present: bool
    absent_since: datetime.datetime | None
    memory_total_bytes: int | None
    mig_mode_current: str
    mig_mode_pending: str
    power_limit_milliwatts: int | None
    ecc_errors: dict[str, Any] | None
    unsupported: list[str]
    errors: list[Any]
    # readings
    last_seen_at: datetime.datetime
    memory_used_bytes: int | None
    gpu_percent: int | None
    memory_percent: int | None
    temperature_celsius: int | None
    power_usage_milliwatts: int | None
    processes: list[Any] | None


GPU_FIELD_NAMES: tuple[str, ...] = tuple(field.name for field in fields(GpuFields))
GPU_STATE_FIELD_NAMES: tuple[str, ...] = GPU_FIELD_NAMES[: GPU_FIELD_NAMES.index("last_seen_at")]
GPU_READING_FIELD_NAMES: tuple[str, ...] = GPU_FIELD_NAMES[len(GPU_STATE_FIELD_NAMES) :]


@dataclass(frozen=True)
class StoredGpu:
    """An observed GPU of the node, with the inventory row it is linked to (None: none)."""

    pk: int
    uuid: str
    fields: GpuFields
    inventory: InventoryGpu | None


@dataclass(frozen=True)
class MigDevice:
    """One MIG device of a GPU: a stored row (``pk`` set) or one the report lists (``pk`` None)."""

    slot: int
    uuid: str
    profile: str
    gpu_instance_id: int | None
    compute_instance_id: int | None
    gpu_instance_slices: int | None
    compute_instance_slices: int | None
    multiprocessor_count: int | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    pk: int | None = None

    def structure(self) -> tuple[Any, ...]:
        """What makes it the same device: everything but the memory in use."""
        return (
            self.slot, self.uuid, self.profile, self.gpu_instance_id, self.compute_instance_id,
            self.gpu_instance_slices, self.compute_instance_slices, self.multiprocessor_count, self.memory_total_bytes,
        )  # fmt: skip


MIG_DEVICE_FIELD_NAMES: tuple[str, ...] = tuple(field.name for field in fields(MigDevice) if field.name != "pk")


@dataclass(frozen=True)
class StoredReportState:
    """The node's report state (``NodeReportState``) as the report found it, locked."""

    node_id: int
    agent_started_at: datetime.datetime | None
    sequence: int | None
    stale_at: datetime.datetime | None
    stale_on_receipt: bool  # ``NodeReportState.is_stale_at`` the report's receipt
    is_stale: bool  # the flag the stale-marking task set
    stale_since: datetime.datetime | None
    mig_mismatch: bool
    mig_reset_pending: bool
    mig_detail: dict[str, Any]
    unidentified_gpus: list[int]
    reports_accepted: int


@dataclass(frozen=True)
class PlannedMig:
    """The node's planned mig-parted entries (None: the plan is unknown) and the MIG manager's
    state label (``telemetry.selectors.node_planned_mig``)."""

    entries: list[dict[str, Any]] | None
    config_state: str


@dataclass(frozen=True)
class StoredNode:
    """Everything of one node a report is compared with."""

    state: StoredReportState
    gpus: tuple[StoredGpu, ...]  # every observed GPU of the node, present or absent, in the order read
    # The stored MIG devices by observed GPU pk, in slot order. Read only when the report or the
    # stored MIG modes can touch them (``changes.mig_devices_needed``); empty otherwise.
    mig_devices: Mapping[int, tuple[MigDevice, ...]]
    planned_mig: PlannedMig

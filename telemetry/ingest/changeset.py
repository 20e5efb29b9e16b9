"""The change set of one report: what ``changes.report_changes`` decides and ``write`` applies.

Plain values, no database. Observed GPUs are referred to by UUID (unique per node): rows the change
set creates have no primary key until they are written.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from audit.actions import AuditAction
from clusters.inventory import ObservedGpuSpec
from telemetry.ingest.stored import GpuFields, MigDevice


@dataclass(frozen=True)
class GpuCreate:
    uuid: str
    first_seen_at: datetime.datetime
    fields: GpuFields


@dataclass(frozen=True)
class GpuUpdate:
    pk: int
    uuid: str
    fields: GpuFields


@dataclass(frozen=True)
class MigCreate:
    gpu_uuid: str  # the observed GPU the device is on
    device: MigDevice


@dataclass(frozen=True)
class MigMemoryUpdate:
    pk: int
    memory_used_bytes: int | None


@dataclass(frozen=True)
class RawSample:
    """One raw sample (tier raw, ``samples`` 1) of an observed GPU."""

    gpu_uuid: str
    at: datetime.datetime
    gpu_percent: int | None
    memory_percent: int | None
    memory_used_bytes: int | None
    temperature_celsius: int | None
    power_milliwatts: int | None


@dataclass(frozen=True)
class InventoryObservation:
    """The GPUs to hand to ``clusters.inventory.node_gpus_observe``, and the inventory row each
    observed GPU (by UUID) is linked to now, to relink them to the rows it returns
    (``inventory_relinks``)."""

    specs: tuple[ObservedGpuSpec, ...]
    links: tuple[tuple[str, int | None], ...]


@dataclass(frozen=True)
class RowChanges:
    """The observed state's rows, written before anything is audited."""

    stored_pks: Mapping[str, int]  # the pk of each stored observed GPU, by UUID
    gpus_created: tuple[GpuCreate, ...]
    # Every reported GPU already stored (its readings), then the ones gone absent.
    gpus_updated: tuple[GpuUpdate, ...]
    gpu_state_changed: bool  # False: only the readings of ``gpus_updated`` need writing
    mig_replaced_on: tuple[int, ...]  # observed GPUs (pk) whose stored MIG devices are deleted
    mig_created: tuple[MigCreate, ...]
    mig_memory_updates: tuple[MigMemoryUpdate, ...]
    samples: tuple[RawSample, ...]
    inventory: InventoryObservation | None  # None: the inventory already says what the report does
    # Readings (``GPU_READING_FIELD_NAMES``) equal to the stored ones on every GPU of
    # ``gpus_updated``: left out of their UPDATE (the processes seldom change).
    unchanged_readings: frozenset[str] = frozenset()


@dataclass(frozen=True)
class AuditEntry:
    """One audit event to write (``audit_record``, no actor), in the ingest's transaction."""

    action: AuditAction
    target_node_id: int  # every event of a report is about its node
    before: dict[str, Any]
    after: dict[str, Any]
    details: dict[str, Any]


@dataclass(frozen=True)
class ReportStateUpdate:
    """The node's report state after the report (``NodeReportState`` attribute names)."""

    token_id: int
    agent_version: str
    agent_started_at: datetime.datetime
    sequence: int
    collected_at: datetime.datetime
    received_at: datetime.datetime
    interval_seconds: int
    stale_at: datetime.datetime
    undelivered_reports: int
    reports_accepted: int
    driver_version: str
    cuda_driver_version: str
    errors: list[Any]
    is_stale: bool
    stale_since: datetime.datetime | None
    mig_mismatch: bool
    mig_reset_pending: bool
    mig_detail: dict[str, Any]
    unidentified_gpus: list[int]


@dataclass(frozen=True)
class NodeChanges:
    """The audited part, written last: the audit events in order, then the report state."""

    audit_events: tuple[AuditEntry, ...]
    state: ReportStateUpdate


@dataclass(frozen=True)
class ChangeSet:
    rows: RowChanges
    node: NodeChanges

"""The report an agent sends: a typed mirror of ``report_schema.json``.

The JSON schema is the contract the portal validates against; these TypedDicts let the agent's
code be checked against the same shape. A change to one must be made in the other, and a change
that an old portal could not accept needs a new ``schema_version``.
"""

# No "from __future__ import annotations" here: TypedDict must see NotRequired[...] at runtime
# (Python 3.11 misses it in string annotations), so the model can be compared with the schema.
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

SCHEMA_VERSION: Literal[1] = 1
SCHEMA_PATH = Path(__file__).with_name("report_schema.json")

MigModeName = Literal["enabled", "disabled"]


class CallError(TypedDict):
    """One failed NVML call (or an unexpected failure while reading one GPU)."""

    call: str  # the pynvml function, e.g. "nvmlDeviceGetPowerUsage"
    field: str  # the report field left null because of it, e.g. "power_usage_milliwatts"
    error: str  # the exception class, e.g. "NVMLError_GpuIsLost"
    code: int | None  # the NVML return code, None for a non-NVML exception
    message: str
    mig_index: NotRequired[int]  # set when the call was made on a MIG device handle


class MigMode(TypedDict):
    current: MigModeName
    pending: MigModeName


class Utilization(TypedDict):
    gpu_percent: int
    memory_percent: int


class EccErrors(TypedDict):
    volatile_corrected: int | None
    volatile_uncorrected: int | None
    aggregate_corrected: int | None
    aggregate_uncorrected: int | None


class ProcessReport(TypedDict):
    pid: int
    used_memory_bytes: int | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    mig_uuid: str | None
    pod_uid: str | None
    container_id: str | None


class MigInstanceReport(TypedDict):
    index: int  # the MIG device slot (nvmlDeviceGetMigDeviceHandleByIndex)
    uuid: str | None
    profile: str | None  # e.g. "3g.40gb", "1c.3g.40gb", "1g.10gb+me"
    gpu_instance_id: int | None
    compute_instance_id: int | None
    gpu_instance_slices: int | None
    compute_instance_slices: int | None
    multiprocessor_count: int | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None


class GpuReport(TypedDict):
    index: int
    uuid: str | None
    name: str | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    mig_mode: MigMode | None
    mig_instances: list[MigInstanceReport]
    utilization: Utilization | None
    processes: list[ProcessReport] | None
    temperature_celsius: int | None
    power_usage_milliwatts: int | None
    power_limit_milliwatts: int | None
    ecc_errors: EccErrors | None
    unsupported: list[str]
    errors: list[CallError]


PodDeviceSharing = Literal["exclusive", "mig", "mps", "time-sliced", "hami"]


class PodDevice(TypedDict):
    """One device a container holds, from the kubelet's PodResources API."""

    namespace: str
    pod: str
    pod_uid: str | None  # from the NVML processes' cgroups; PodResources does not carry it
    container: str
    resource: str  # e.g. nvidia.com/gpu, nvidia.com/mig-3g.40gb
    device_id: str  # GPU UUID, MIG device UUID, or a replica ID (GPU UUID::N)
    sharing: PodDeviceSharing


class AgentReport(TypedDict):
    schema_version: Literal[1]
    agent_version: str
    node_name: str
    sequence: int
    agent_started_at: str
    collected_at: str
    interval_seconds: int
    undelivered_reports: int
    driver_version: str | None
    cuda_driver_version: str | None
    gpus: list[GpuReport]
    errors: list[CallError]
    pod_devices: NotRequired[list[PodDevice]]  # absent when PodResources is not read
    pod_resources_error: NotRequired[str | None]
    clock_offset_seconds: NotRequired[float | None]


def load_schema() -> dict[str, Any]:
    """The report's JSON schema, for the portal's validator and for tests."""
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


def format_timestamp(moment: datetime) -> str:
    """UTC, milliseconds, with a Z: the only timestamp form the schema accepts."""
    utc = moment.astimezone(UTC)
    return utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")

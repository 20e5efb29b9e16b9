"""Reads the GPUs of this node through NVML into an ``AgentReport``.

NVML must be initialised (``nvml_session``) around ``collect_report``. Every query goes through
``NvmlCalls``, so a failing GPU yields a GPU entry with nulls and ``errors`` rather than an
exception, and the other GPUs are still reported.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pynvml

from agent import AGENT_VERSION
from agent.mig_profile import profile_from_attributes, profile_from_name
from agent.nvml_calls import NvmlCalls, call_error
from agent.pod_cgroup import read_pod_ref
from agent.report import (
    SCHEMA_VERSION,
    AgentReport,
    CallError,
    EccErrors,
    GpuReport,
    MigInstanceReport,
    MigMode,
    MigModeName,
    ProcessReport,
    Utilization,
    format_timestamp,
)

logger = logging.getLogger(__name__)

MAX_GPUS = 64
MAX_PROCESSES_PER_GPU = 1024
_MIB = 1024 * 1024
# NVML's "not available" value for unsigned ints, e.g. a process's GPU instance id outside MIG.
_UINT_NOT_AVAILABLE = pynvml.NVML_VALUE_NOT_AVAILABLE_uint.value

# The ranges and forms report_schema.json allows (a test keeps them equal). An NVML answer outside
# them is reported as an UnexpectedValue error and left null.
RANGES = {
    "temperature_celsius": (0, 200),
    "power_usage_milliwatts": (0, 10_000_000),
    "power_limit_milliwatts": (0, 10_000_000),
    "utilization.gpu_percent": (0, 100),
    "utilization.memory_percent": (0, 100),
    "mig_instances.gpu_instance_id": (0, 255),
    "mig_instances.compute_instance_id": (0, 255),
    "mig_instances.gpu_instance_slices": (1, 8),
    "mig_instances.compute_instance_slices": (1, 8),
    "mig_instances.multiprocessor_count": (1, 1024),
}
MAX_MIG_DEVICES = 16
_HEX_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
GPU_UUID = re.compile(rf"GPU-{_HEX_UUID}")
MIG_UUID = re.compile(rf"MIG-(?:{_HEX_UUID}|GPU-{_HEX_UUID}/[0-9]+/[0-9]+)")

_ECC_COUNTERS = {
    "volatile_corrected": (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC),
    "volatile_uncorrected": (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
    "aggregate_corrected": (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_AGGREGATE_ECC),
    "aggregate_uncorrected": (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC),
}


@dataclass(frozen=True)
class ReportContext:
    """What a report says about the agent rather than about the GPUs."""

    node_name: str
    sequence: int
    agent_started_at: datetime
    interval_seconds: int
    proc_root: Path


def collect_report(context: ReportContext, *, now: datetime) -> AgentReport:
    errors: list[CallError] = []
    call = NvmlCalls(errors, unsupported=None)
    driver_version = call("driver_version", "nvmlSystemGetDriverVersion")
    cuda_version = call("cuda_driver_version", "nvmlSystemGetCudaDriverVersion")
    count = call("gpus", "nvmlDeviceGetCount")
    gpu_count = int(count) if count is not None else 0
    if gpu_count > MAX_GPUS:
        logger.warning("NVML reports %d GPUs; reporting the first %d", gpu_count, MAX_GPUS)
        gpu_count = MAX_GPUS
    return {
        "schema_version": SCHEMA_VERSION,
        "agent_version": AGENT_VERSION,
        "node_name": context.node_name,
        "sequence": context.sequence,
        "agent_started_at": format_timestamp(context.agent_started_at),
        "collected_at": format_timestamp(now),
        "interval_seconds": context.interval_seconds,
        "undelivered_reports": 0,
        "driver_version": str(driver_version) if driver_version else None,
        "cuda_driver_version": format_cuda_version(cuda_version),
        "gpus": [collect_gpu(index, context.proc_root) for index in range(gpu_count)],
        "errors": errors,
    }


def format_cuda_version(version: Any) -> str | None:
    """NVML encodes CUDA 12.4 as 12040 (1000 * major + 10 * minor)."""
    if version is None or int(version) <= 0:
        return None
    value = int(version)
    return f"{value // 1000}.{value % 1000 // 10}"


def collect_gpu(index: int, proc_root: Path) -> GpuReport:
    gpu: GpuReport = {
        "index": index,
        "uuid": None,
        "name": None,
        "memory_total_bytes": None,
        "memory_used_bytes": None,
        "mig_mode": None,
        "mig_instances": [],
        "utilization": None,
        "processes": None,
        "temperature_celsius": None,
        "power_usage_milliwatts": None,
        "power_limit_milliwatts": None,
        "ecc_errors": None,
        "unsupported": [],
        "errors": [],
    }
    try:
        _read_gpu(gpu, proc_root)
    except Exception as exc:  # an unexpected shape from NVML must not cost the other GPUs
        logger.exception("reading GPU %d failed", index)
        gpu["errors"].append(call_error("collect_gpu", "gpu", exc))
    return gpu


def _read_gpu(gpu: GpuReport, proc_root: Path) -> None:
    call = NvmlCalls(gpu["errors"], gpu["unsupported"])
    handle = call("gpu", "nvmlDeviceGetHandleByIndex", gpu["index"])
    if handle is None:
        return
    gpu["uuid"] = _matching(call, "uuid", "nvmlDeviceGetUUID", GPU_UUID, handle)
    gpu["name"] = _optional_str(call("name", "nvmlDeviceGetName", handle))
    memory = call("memory", "nvmlDeviceGetMemoryInfo", handle)
    if memory is not None:
        gpu["memory_total_bytes"] = int(memory.total)
        gpu["memory_used_bytes"] = int(memory.used)
    gpu["mig_mode"] = _mig_mode(call("mig_mode", "nvmlDeviceGetMigMode", handle))
    gpu["utilization"] = _utilization(call, handle)
    gpu["temperature_celsius"] = _bounded_call(
        call, "temperature_celsius", "nvmlDeviceGetTemperature", handle, pynvml.NVML_TEMPERATURE_GPU
    )
    gpu["power_usage_milliwatts"] = _bounded_call(call, "power_usage_milliwatts", "nvmlDeviceGetPowerUsage", handle)
    gpu["power_limit_milliwatts"] = _bounded_call(
        call, "power_limit_milliwatts", "nvmlDeviceGetEnforcedPowerLimit", handle
    )
    gpu["ecc_errors"] = _ecc_errors(call, handle)
    if gpu["mig_mode"] is not None and gpu["mig_mode"]["current"] == "enabled":
        _read_mig_instances(gpu, handle, proc_root)
    else:
        found = call("processes", "nvmlDeviceGetComputeRunningProcesses", handle)
        if found is not None:
            gpu["processes"] = [_process(p, None, proc_root) for p in found[:MAX_PROCESSES_PER_GPU]]


def _read_mig_instances(gpu: GpuReport, handle: Any, proc_root: Path) -> None:
    """The MIG devices of a MIG-enabled GPU, and their processes.

    Processes are queried per MIG device: on the parent handle NVML returns them only to a
    privileged caller, and per device they come with the instance they run on.
    """
    call = NvmlCalls(gpu["errors"], gpu["unsupported"])
    max_count = call("mig_instances", "nvmlDeviceGetMaxMigDeviceCount", handle)
    processes: list[ProcessReport] = []
    any_process_query_succeeded = False
    every_slot_read = max_count is not None
    for slot in range(min(int(max_count or 0), MAX_MIG_DEVICES)):
        try:
            mig_handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError_NotFound:
            continue  # an empty slot: no MIG device was created there
        except pynvml.NVMLError as exc:
            gpu["errors"].append(call_error("nvmlDeviceGetMigDeviceHandleByIndex", "mig_instances", exc, slot))
            every_slot_read = False
            continue
        mig_call = NvmlCalls(gpu["errors"], gpu["unsupported"], mig_index=slot, field_prefix="mig_instances.")
        instance = _mig_instance(mig_call, mig_handle, slot, gpu["memory_total_bytes"])
        gpu["mig_instances"].append(instance)
        found = mig_call("processes", "nvmlDeviceGetComputeRunningProcesses", mig_handle)
        if found is not None:
            any_process_query_succeeded = True
            processes.extend(_process(p, instance, proc_root) for p in found)
    # [] claims "nothing runs here": only when some query answered, or when no MIG device exists at all
    if any_process_query_succeeded or (every_slot_read and not gpu["mig_instances"]):
        gpu["processes"] = processes[:MAX_PROCESSES_PER_GPU]


def _mig_instance(call: NvmlCalls, handle: Any, slot: int, parent_memory_total: int | None) -> MigInstanceReport:
    instance: MigInstanceReport = {
        "index": slot,
        "uuid": _matching(call, "uuid", "nvmlDeviceGetUUID", MIG_UUID, handle),
        "profile": None,
        "gpu_instance_id": _bounded_call(call, "gpu_instance_id", "nvmlDeviceGetGpuInstanceId", handle),
        "compute_instance_id": _bounded_call(call, "compute_instance_id", "nvmlDeviceGetComputeInstanceId", handle),
        "gpu_instance_slices": None,
        "compute_instance_slices": None,
        "multiprocessor_count": None,
        "memory_total_bytes": None,
        "memory_used_bytes": None,
    }
    name = _optional_str(call("profile", "nvmlDeviceGetName", handle))
    attributes = call("attributes", "nvmlDeviceGetAttributes", handle)
    if attributes is not None:
        function = "nvmlDeviceGetAttributes"
        instance["gpu_instance_slices"] = _bounded(
            call, "gpu_instance_slices", function, attributes.gpuInstanceSliceCount
        )
        instance["compute_instance_slices"] = _bounded(
            call, "compute_instance_slices", function, attributes.computeInstanceSliceCount
        )
        instance["multiprocessor_count"] = _bounded(
            call, "multiprocessor_count", function, attributes.multiprocessorCount
        )
        instance["memory_total_bytes"] = int(attributes.memorySizeMB) * _MIB
    memory = call("memory", "nvmlDeviceGetMemoryInfo", handle)
    if memory is not None:
        instance["memory_total_bytes"] = int(memory.total)
        instance["memory_used_bytes"] = int(memory.used)
    instance["profile"] = profile_from_name(name)
    if (
        instance["profile"] is None
        and instance["gpu_instance_slices"] is not None
        and instance["compute_instance_slices"] is not None
        and parent_memory_total
    ):
        instance["profile"] = profile_from_attributes(
            gpu_instance_slices=instance["gpu_instance_slices"],
            compute_instance_slices=instance["compute_instance_slices"],
            memory_size_mib=int(attributes.memorySizeMB),
            parent_memory_total_bytes=parent_memory_total,
        )
    return instance


def _process(info: Any, instance: MigInstanceReport | None, proc_root: Path) -> ProcessReport:
    pid = int(info.pid)
    pod = read_pod_ref(pid, proc_root)
    gpu_instance_id = _instance_id(getattr(info, "gpuInstanceId", None))
    compute_instance_id = _instance_id(getattr(info, "computeInstanceId", None))
    if instance is not None:
        gpu_instance_id = gpu_instance_id if gpu_instance_id is not None else instance["gpu_instance_id"]
        compute_instance_id = (
            compute_instance_id if compute_instance_id is not None else instance["compute_instance_id"]
        )
    return {
        "pid": pid,
        "used_memory_bytes": _optional_int(info.usedGpuMemory),
        "gpu_instance_id": gpu_instance_id,
        "compute_instance_id": compute_instance_id,
        "mig_uuid": instance["uuid"] if instance is not None else None,
        "pod_uid": pod.pod_uid if pod else None,
        "container_id": pod.container_id if pod else None,
    }


def _ecc_errors(call: NvmlCalls, handle: Any) -> EccErrors | None:
    counts = {
        name: _optional_int(call(f"ecc_errors.{name}", "nvmlDeviceGetTotalEccErrors", handle, error_type, counter))
        for name, (error_type, counter) in _ECC_COUNTERS.items()
    }
    if all(value is None for value in counts.values()):
        return None
    return {
        "volatile_corrected": counts["volatile_corrected"],
        "volatile_uncorrected": counts["volatile_uncorrected"],
        "aggregate_corrected": counts["aggregate_corrected"],
        "aggregate_uncorrected": counts["aggregate_uncorrected"],
    }


def _mig_mode(modes: Any) -> MigMode | None:
    if modes is None:
        return None
    current, pending = modes
    return {"current": _mig_mode_name(current), "pending": _mig_mode_name(pending)}


def _mig_mode_name(value: Any) -> MigModeName:
    return "enabled" if int(value) == pynvml.NVML_DEVICE_MIG_ENABLE else "disabled"


def _utilization(call: NvmlCalls, handle: Any) -> Utilization | None:
    rates = call("utilization", "nvmlDeviceGetUtilizationRates", handle)
    if rates is None:
        return None
    function = "nvmlDeviceGetUtilizationRates"
    gpu_percent = _bounded(call, "utilization.gpu_percent", function, rates.gpu)
    memory_percent = _bounded(call, "utilization.memory_percent", function, rates.memory)
    if gpu_percent is None or memory_percent is None:
        return None
    return {"gpu_percent": gpu_percent, "memory_percent": memory_percent}


def _bounded_call(call: NvmlCalls, field: str, function: str, *args: Any) -> int | None:
    return _bounded(call, field, function, call(field, function, *args))


def _bounded(call: NvmlCalls, field: str, function: str, value: Any) -> int | None:
    if value is None:
        return None
    number = int(value)
    low, high = RANGES[call.qualify(field)]
    if low <= number <= high:
        return number
    call.reject(field, function, number, f"{low}..{high}")
    return None


def _matching(call: NvmlCalls, field: str, function: str, form: re.Pattern[str], handle: Any) -> str | None:
    text = _optional_str(call(field, function, handle))
    if text is None or form.fullmatch(text):
        return text
    call.reject(field, function, text, f"the form {form.pattern}")
    return None


def _instance_id(value: Any) -> int | None:
    """A process's GPU/compute instance id; None outside MIG (NVML's "not available")."""
    if value is None or int(value) == _UINT_NOT_AVAILABLE:
        return None
    number = int(value)
    low, high = RANGES["mig_instances.gpu_instance_id"]
    return number if low <= number <= high else None


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _optional_str(value: Any) -> str | None:
    if value is None:
        return None
    text = value.decode() if isinstance(value, bytes) else str(value)
    return text or None

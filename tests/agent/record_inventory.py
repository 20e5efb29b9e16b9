"""Record a GPU node's NVML answers as a replay fixture (the format ``nvml_replay`` serves).

Run on a GPU node, from the repository root::

    python -m tests.agent.record_inventory --description "..." > tests/agent/recordings/<name>.json

It makes the same pynvml calls the agent makes, in the same order, and stores each answer (or the
NVML error it raised) under the function's name, plus the ``/proc/<pid>/cgroup`` of every process
found. Check a new recording for names or pod UIDs you would rather not commit.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

_NA_ULONGLONG = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
_ECC_KEYS = (
    "NVML_MEMORY_ERROR_TYPE_CORRECTED,NVML_VOLATILE_ECC",
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED,NVML_VOLATILE_ECC",
    "NVML_MEMORY_ERROR_TYPE_CORRECTED,NVML_AGGREGATE_ECC",
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED,NVML_AGGREGATE_ECC",
)
_ATTRIBUTE_FIELDS = [name for name, _ in pynvml.c_nvmlDeviceAttributes._fields_]


def _answer(function: str, *args: Any, convert: Callable[[Any], Any] = lambda value: value) -> Any:
    try:
        return convert(getattr(pynvml, function)(*args))
    except pynvml.NVMLError as exc:
        return {"nvml_error": type(exc).__name__}


def _failed(answer: Any) -> bool:
    return isinstance(answer, dict) and "nvml_error" in answer


def _memory(info: Any) -> dict[str, int]:
    return {"total": int(info.total), "free": int(info.free), "used": int(info.used)}


def _processes(found: Any) -> list[dict[str, int]]:
    return [
        {
            "pid": int(p.pid),
            "usedGpuMemory": _NA_ULONGLONG if p.usedGpuMemory is None else int(p.usedGpuMemory),
            "gpuInstanceId": int(p.gpuInstanceId),
            "computeInstanceId": int(p.computeInstanceId),
        }
        for p in found
    ]


def _by_constant(function: str, handle: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    return {key: _answer(function, handle, *(getattr(pynvml, name) for name in key.split(","))) for key in keys}


def record_mig_device(handle: Any) -> dict[str, Any]:
    return {
        "nvmlDeviceGetUUID": _answer("nvmlDeviceGetUUID", handle),
        "nvmlDeviceGetGpuInstanceId": _answer("nvmlDeviceGetGpuInstanceId", handle),
        "nvmlDeviceGetComputeInstanceId": _answer("nvmlDeviceGetComputeInstanceId", handle),
        "nvmlDeviceGetName": _answer("nvmlDeviceGetName", handle),
        "nvmlDeviceGetAttributes": _answer(
            "nvmlDeviceGetAttributes", handle, convert=lambda a: {f: int(getattr(a, f)) for f in _ATTRIBUTE_FIELDS}
        ),
        "nvmlDeviceGetMemoryInfo": _answer("nvmlDeviceGetMemoryInfo", handle, convert=_memory),
        "nvmlDeviceGetComputeRunningProcesses": _answer(
            "nvmlDeviceGetComputeRunningProcesses", handle, convert=_processes
        ),
    }


def record_device(index: int) -> dict[str, Any]:
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError as exc:
        return {"nvmlDeviceGetHandleByIndex": {"nvml_error": type(exc).__name__}}
    device: dict[str, Any] = {
        "nvmlDeviceGetUUID": _answer("nvmlDeviceGetUUID", handle),
        "nvmlDeviceGetName": _answer("nvmlDeviceGetName", handle),
        "nvmlDeviceGetMemoryInfo": _answer("nvmlDeviceGetMemoryInfo", handle, convert=_memory),
        "nvmlDeviceGetMigMode": _answer("nvmlDeviceGetMigMode", handle, convert=lambda modes: [int(m) for m in modes]),
        "nvmlDeviceGetUtilizationRates": _answer(
            "nvmlDeviceGetUtilizationRates", handle, convert=lambda u: {"gpu": int(u.gpu), "memory": int(u.memory)}
        ),
        "nvmlDeviceGetTemperature": _by_constant("nvmlDeviceGetTemperature", handle, ("NVML_TEMPERATURE_GPU",)),
        "nvmlDeviceGetPowerUsage": _answer("nvmlDeviceGetPowerUsage", handle),
        "nvmlDeviceGetEnforcedPowerLimit": _answer("nvmlDeviceGetEnforcedPowerLimit", handle),
        "nvmlDeviceGetTotalEccErrors": _by_constant("nvmlDeviceGetTotalEccErrors", handle, _ECC_KEYS),
    }
    mig_mode = device["nvmlDeviceGetMigMode"]
    if not _failed(mig_mode) and mig_mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE:
        device["nvmlDeviceGetMaxMigDeviceCount"] = _answer("nvmlDeviceGetMaxMigDeviceCount", handle)
        slots = device["nvmlDeviceGetMaxMigDeviceCount"]
        device["mig_devices"] = []
        for slot in range(0 if _failed(slots) else int(slots)):
            try:
                mig_handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except pynvml.NVMLError as exc:
                device["mig_devices"].append({"nvml_error": type(exc).__name__})
                continue
            device["mig_devices"].append(record_mig_device(mig_handle))
    else:
        device["nvmlDeviceGetComputeRunningProcesses"] = _answer(
            "nvmlDeviceGetComputeRunningProcesses", handle, convert=_processes
        )
    return device


def _pids(device: dict[str, Any]) -> list[int]:
    groups = [device, *device.get("mig_devices", [])]
    found = [group.get("nvmlDeviceGetComputeRunningProcesses") for group in groups]
    return [p["pid"] for processes in found if isinstance(processes, list) for p in processes]


def record_node(proc_root: Path, description: str) -> dict[str, Any]:
    """The node's recording; NVML must be initialised."""
    count = _answer("nvmlDeviceGetCount")
    devices = [] if _failed(count) else [record_device(index) for index in range(int(count))]
    proc: dict[str, str] = {}
    for pid in sorted({pid for device in devices for pid in _pids(device)}):
        try:
            proc[str(pid)] = (proc_root / str(pid) / "cgroup").read_text(encoding="utf-8")
        except OSError:
            continue
    system = {
        "nvmlSystemGetDriverVersion": _answer("nvmlSystemGetDriverVersion"),
        "nvmlSystemGetCudaDriverVersion": _answer("nvmlSystemGetCudaDriverVersion"),
    }
    if _failed(count):
        system["nvmlDeviceGetCount"] = count
    return {
        "description": description,
        "provenance": "Recorded with tests/agent/record_inventory.py.",
        "system": system,
        "devices": devices,
        "proc": proc,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--description", default="", help="what this node is, for the fixture's reader")
    parser.add_argument("--proc-root", type=Path, default=Path("/proc"))
    args = parser.parse_args()
    pynvml.nvmlInit()
    try:
        recording = record_node(args.proc_root, args.description)
    finally:
        pynvml.nvmlShutdown()
    sys.stdout.write(json.dumps(recording, indent=2) + "\n")


if __name__ == "__main__":
    main()

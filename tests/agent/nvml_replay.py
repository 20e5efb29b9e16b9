"""Serve a recorded GPU inventory through the real ``pynvml`` module's functions.

NVML itself is absent where the tests run, so the functions the agent calls are replaced, one by
one, on the ``pynvml`` module (with pytest's monkeypatch). Everything else stays real: handles are
``pynvml.c_nvmlDevice_t`` pointers, memory and utilisation come back as pynvml's ctypes structures,
processes as the ``nvmlFriendlyObject`` pynvml builds from ``c_nvmlProcessInfo_v3_t``, and failures
are raised as pynvml's own ``NVMLError_*`` classes. A function the agent calls that is not replayed
falls through to real pynvml, which raises ``NVMLError_Uninitialized``, so it shows up in the
report's errors rather than passing unnoticed.

A recording (``recordings/*.json``) holds, per device, the value each pynvml function returned,
keyed by the function's name:

- every function the agent calls on a device must be recorded for it (a missing one fails the test);
- ``{"nvml_error": "NVMLError_GpuIsLost"}`` in place of a value means the call raised that error;
- ``nvmlDeviceGetTemperature`` maps sensor constant names to values, ``nvmlDeviceGetTotalEccErrors``
  maps ``"<error type constant>,<counter type constant>"`` to counts;
- ``mig_devices`` lists the MIG device slots (``nvmlDeviceGetMigDeviceHandleByIndex``), each a device
  of its own or an error (an empty slot is ``NVMLError_NotFound``);
- ``proc`` maps host PIDs to the contents of their ``/proc/<pid>/cgroup``.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import pytest

RECORDINGS = Path(__file__).with_name("recordings")

SYSTEM_FUNCTIONS = ("nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion")
DEVICE_FUNCTIONS = (
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetAttributes",
)
_FIRST_HANDLE = 0x7F00_0000_1000  # fake addresses: the handles are never dereferenced


def load_recording(name: str) -> dict[str, Any]:
    recording: dict[str, Any] = json.loads((RECORDINGS / f"{name}.json").read_text(encoding="utf-8"))
    return recording


def nvml_error(name: str) -> pynvml.NVMLError:
    error_class = getattr(pynvml, name)
    assert isinstance(error_class, type) and issubclass(error_class, pynvml.NVMLError), name
    error: pynvml.NVMLError = error_class()
    return error


def _raise_if_error(value: Any) -> Any:
    if isinstance(value, dict) and "nvml_error" in value:
        raise nvml_error(value["nvml_error"])
    return value


class NvmlReplay:
    """The recorded node behind pynvml; ``calls`` logs every replayed call in order."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.recording = recording
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.initialised = 0
        self._devices: dict[int, dict[str, Any]] = {}
        self._mig_handles: dict[tuple[int, int], Any] = {}
        self._top_level_handles: list[Any] = []
        self._next_address = _FIRST_HANDLE
        for device in recording["devices"]:
            self._top_level_handles.append(self._register(device))

    def install(self, monkeypatch: pytest.MonkeyPatch) -> NvmlReplay:
        replacements: dict[str, Callable[..., Any]] = {
            "nvmlInit": self._init,
            "nvmlShutdown": self._shutdown,
            "nvmlDeviceGetCount": self._count,
            "nvmlDeviceGetHandleByIndex": self._handle_by_index,
            "nvmlDeviceGetMigDeviceHandleByIndex": self._mig_handle_by_index,
        }
        for name in SYSTEM_FUNCTIONS:
            replacements[name] = self._system_function(name)
        for name in DEVICE_FUNCTIONS:
            replacements[name] = self._device_function(name)
        for name, replacement in replacements.items():
            assert callable(getattr(pynvml, name)), f"pynvml has no {name}"
            monkeypatch.setattr(pynvml, name, self._logged(name, replacement))
        return self

    # --- handles -------------------------------------------------------------------------

    def handle(self, index: int) -> Any:
        """The handle nvmlDeviceGetHandleByIndex(index) returns."""
        return self._top_level_handles[index]

    def same_device(self, a: Any, b: Any) -> bool:
        return bool(self._address(a) == self._address(b))

    def _register(self, device: dict[str, Any]) -> Any:
        address = self._next_address
        self._next_address += 0x100
        self._devices[address] = device
        for index, slot in enumerate(device.get("mig_devices", [])):
            if "nvml_error" not in slot:
                self._mig_handles[(address, index)] = self._register(slot)
        return ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlDevice_t)

    def _address(self, handle: Any) -> int:
        assert isinstance(handle, pynvml.c_nvmlDevice_t), f"not an NVML device handle: {handle!r}"
        address = ctypes.cast(handle, ctypes.c_void_p).value
        assert address in self._devices, "unknown device handle"
        return address

    def _device(self, handle: Any) -> dict[str, Any]:
        return self._devices[self._address(handle)]

    # --- replayed functions ---------------------------------------------------------------

    def _logged(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def replayed(*args: Any) -> Any:
            self.calls.append((name, args))
            return function(*args)

        replayed.__name__ = name
        return replayed

    def _init(self) -> None:
        _raise_if_error(self.recording.get("nvmlInit"))
        self.initialised += 1

    def _shutdown(self) -> None:
        self._require_init()
        self.initialised -= 1

    def _require_init(self) -> None:
        if self.initialised <= 0:
            raise pynvml.NVMLError_Uninitialized()

    def _count(self) -> int:
        self._require_init()
        return int(_raise_if_error(self.recording["system"].get("nvmlDeviceGetCount", len(self._top_level_handles))))

    def _handle_by_index(self, index: int) -> Any:
        self._require_init()
        if not 0 <= index < len(self._top_level_handles):
            raise pynvml.NVMLError_InvalidArgument()
        _raise_if_error(self.recording["devices"][index].get("nvmlDeviceGetHandleByIndex"))
        return self._top_level_handles[index]

    def _mig_handle_by_index(self, handle: Any, index: int) -> Any:
        self._require_init()
        slots = self._device(handle).get("mig_devices", [])
        if not 0 <= index < len(slots):
            raise pynvml.NVMLError_InvalidArgument()
        _raise_if_error(slots[index])
        return self._mig_handles[(self._address(handle), index)]

    def _system_function(self, name: str) -> Callable[..., Any]:
        def system_function() -> Any:
            self._require_init()
            return _raise_if_error(self.recording["system"][name])

        return system_function

    def _device_function(self, name: str) -> Callable[..., Any]:
        convert: Callable[..., Any] = _CONVERTERS.get(name, _plain)

        def device_function(handle: Any, *args: Any) -> Any:
            self._require_init()
            device = self._device(handle)
            assert name in device, f"the recording has no {name} for this device"
            return convert(_raise_if_error(device[name]), *args)

        return device_function


# --- recorded JSON -> what pynvml returns ---------------------------------------------------


def _plain(value: Any) -> Any:
    return value


def _memory(value: dict[str, int]) -> Any:
    return pynvml.c_nvmlMemory_t(total=value["total"], free=value["free"], used=value["used"])


def _utilization(value: dict[str, int]) -> Any:
    return pynvml.c_nvmlUtilization_t(gpu=value["gpu"], memory=value["memory"])


def _attributes(value: dict[str, int]) -> Any:
    return pynvml.c_nvmlDeviceAttributes(**value)


def _processes(value: list[dict[str, int]]) -> list[Any]:
    """As pynvml.nvmlDeviceGetComputeRunningProcesses_v3 builds them, NVML's "not available" included."""
    processes = []
    for recorded in value:
        friendly = pynvml.nvmlStructToFriendlyObject(pynvml.c_nvmlProcessInfo_v3_t(**recorded))
        if friendly.usedGpuMemory == pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
            friendly.usedGpuMemory = None
        processes.append(friendly)
    return processes


def _by_constant(value: dict[str, int], *args: int) -> int:
    """Look a value up by the pynvml constants it was recorded under (e.g. NVML_TEMPERATURE_GPU)."""
    for key, recorded in value.items():
        if tuple(getattr(pynvml, constant) for constant in key.split(",")) == tuple(args):
            return _raise_if_error(recorded)  # type: ignore[no-any-return]
    raise pynvml.NVMLError_InvalidArgument()


_CONVERTERS: dict[str, Callable[..., Any]] = {
    "nvmlDeviceGetMemoryInfo": _memory,
    "nvmlDeviceGetUtilizationRates": _utilization,
    "nvmlDeviceGetAttributes": _attributes,
    "nvmlDeviceGetComputeRunningProcesses": _processes,
    "nvmlDeviceGetTemperature": _by_constant,
    "nvmlDeviceGetTotalEccErrors": _by_constant,
}


def write_proc_root(recording: dict[str, Any], root: Path) -> Path:
    """A fake host /proc holding the recorded ``/proc/<pid>/cgroup`` files."""
    for pid, cgroup in recording.get("proc", {}).items():
        (root / pid).mkdir(parents=True)
        (root / pid / "cgroup").write_text(cgroup, encoding="utf-8")
    return root

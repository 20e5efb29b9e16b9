"""Calling NVML so that a failure becomes a line in the report instead of an exception.

A node agent that stops reporting because one GPU fell off the bus is worse than useless: the
portal would lose the other GPUs too. Every NVML query therefore goes through ``NvmlCalls``,
which returns None on failure and records why: ``NVMLError_NotSupported`` in the GPU's
``unsupported`` list (the device simply lacks the feature), any other NVML error in ``errors``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pynvml

from agent.report import CallError

logger = logging.getLogger(__name__)

MAX_MESSAGE_LENGTH = 512


class NvmlUnavailable(Exception):
    """NVML cannot be used on this node at all (no driver, driver not loaded, no permission)."""


def call_error(call: str, field: str, exc: BaseException, mig_index: int | None = None) -> CallError:
    code = exc.value if isinstance(exc, pynvml.NVMLError) else None
    entry: CallError = {
        "call": call,
        "field": field,
        "error": type(exc).__name__,
        "code": int(code) if code is not None else None,
        "message": _message(exc),
    }
    if mig_index is not None:
        entry["mig_index"] = mig_index
    return entry


def _message(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__)[:MAX_MESSAGE_LENGTH]


class NvmlCalls:
    """Calls pynvml functions by name and records their failures.

    Functions are looked up on the ``pynvml`` module at call time, by the name recorded in an
    error entry, so the entry names exactly the function that failed.
    """

    def __init__(
        self,
        errors: list[CallError],
        unsupported: list[str] | None,
        *,
        mig_index: int | None = None,
        field_prefix: str = "",
    ) -> None:
        self._errors = errors
        self._unsupported = unsupported
        self._mig_index = mig_index
        self._field_prefix = field_prefix

    def qualify(self, field: str) -> str:
        return self._field_prefix + field

    def reject(self, field: str, function: str, value: Any, expectation: str) -> None:
        """Record an answer the report cannot carry (out of the schema's range or form).

        The portal validates the whole report, so one odd sensor value must become an error entry
        rather than a report the portal refuses.
        """
        entry: CallError = {
            "call": function,
            "field": self.qualify(field),
            "error": "UnexpectedValue",
            "code": None,
            "message": f"NVML returned {value!r:.80}, expected {expectation}"[:MAX_MESSAGE_LENGTH],
        }
        if self._mig_index is not None:
            entry["mig_index"] = self._mig_index
        self._errors.append(entry)

    def __call__(self, field: str, function: str, *args: Any) -> Any:
        qualified_field = self.qualify(field)
        try:
            return getattr(pynvml, function)(*args)
        except pynvml.NVMLError_NotSupported as exc:
            if self._unsupported is None:
                self._errors.append(call_error(function, qualified_field, exc, self._mig_index))
            elif qualified_field not in self._unsupported:
                self._unsupported.append(qualified_field)
        except pynvml.NVMLError as exc:
            logger.debug("%s failed: %s", function, exc)
            self._errors.append(call_error(function, qualified_field, exc, self._mig_index))
        return None


@contextmanager
def nvml_session() -> Iterator[None]:
    """NVML initialised for the duration of the block; NvmlUnavailable when it cannot be."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound as exc:
        raise NvmlUnavailable(
            f"NVML library not found (libnvidia-ml.so.1; {type(exc).__name__}): "
            "no NVIDIA driver is installed on this node or it is not visible to the agent"
        ) from exc
    except pynvml.NVMLError_DriverNotLoaded as exc:
        raise NvmlUnavailable(
            f"NVIDIA kernel driver not loaded ({type(exc).__name__}): the NVML library is present "
            "but the driver is not running"
        ) from exc
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML initialisation failed: {type(exc).__name__}: {_message(exc)}") from exc
    try:
        yield
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as exc:
            logger.warning("nvmlShutdown failed: %s", exc)

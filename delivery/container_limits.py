"""The cgroup limits every container of a project namespace runs under. Pure functions.

A unit of a flavor may use ``cpu_millicores_per_unit`` CPU and ``memory_mib_per_unit`` memory,
and a container uses at most one unit. So, for the project's LimitRange (type Container):

* ``max``: the largest per-unit CPU and memory among the project's grants. No container may ask
  for more than the biggest unit the project holds.
* ``default`` (the limits filled in for a container that names none): the smallest per-unit CPU
  and memory among the grants, never below the default request. A container that says nothing
  then fits in any unit the project holds, and cannot take a big unit's share unnoticed; one that
  needs more says so, up to ``max``.
* ``defaultRequest``: the configured default request (``GPUPORTAL_LIMITRANGE_DEFAULT_CPU`` /
  ``_MEMORY``, 100m / 256Mi), capped at the default limit (a flavor of 128 MiB per unit gets a
  128Mi default request).

So ``defaultRequest <= default <= max`` always holds, which the API server requires of a
LimitRange. The namespace's ResourceQuota carries ``limits.cpu`` / ``limits.memory`` equal to its
requests: the sum over the grants of quantity times the per-unit values (docs/sharing.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from kernel.quantity import parse_quantity

MIB = 1024 * 1024


class PerUnit(Protocol):
    @property
    def cpu_millicores_per_unit(self) -> int: ...

    @property
    def memory_mib_per_unit(self) -> int: ...


@dataclass(frozen=True)
class ContainerLimits:
    """A LimitRange's Container entry, as Kubernetes quantities."""

    default_request: dict[str, str]
    default: dict[str, str]
    max: dict[str, str]

    def as_entry(self) -> dict[str, object]:
        return {"type": "Container", "defaultRequest": self.default_request, "default": self.default, "max": self.max}


def millicores(quantity: str) -> int:
    """A CPU quantity in millicores, rounded up (``"0.5"`` → 500, ``"100m"`` → 100)."""
    return math.ceil(Decimal(parse_quantity(quantity)) * 1000)


def mebibytes(quantity: str) -> int:
    """A memory quantity in MiB, rounded up (``"1Gi"`` → 1024, ``"200M"`` → 191)."""
    return math.ceil(Decimal(parse_quantity(quantity)) / MIB)


def _request(configured: str, amount: int, cap: int, unit: str) -> str:
    """The configured default request as written, or the cap when it is larger."""
    return configured if amount <= cap else f"{cap}{unit}"


def container_limits(grants: Iterable[PerUnit], *, request_cpu: str, request_memory: str) -> ContainerLimits:
    """The LimitRange entry for a namespace holding ``grants`` (at least one)."""
    units = list(grants)
    if not units:
        raise ValueError("container limits need at least one grant")
    cpu_max = max(unit.cpu_millicores_per_unit for unit in units)
    memory_max = max(unit.memory_mib_per_unit for unit in units)
    cpu_request, memory_request = millicores(request_cpu), mebibytes(request_memory)
    cpu_default = min(max(min(unit.cpu_millicores_per_unit for unit in units), cpu_request), cpu_max)
    memory_default = min(max(min(unit.memory_mib_per_unit for unit in units), memory_request), memory_max)
    return ContainerLimits(
        default_request={
            "cpu": _request(request_cpu, cpu_request, cpu_default, "m"),
            "memory": _request(request_memory, memory_request, memory_default, "Mi"),
        },
        default={"cpu": f"{cpu_default}m", "memory": f"{memory_default}Mi"},
        max={"cpu": f"{cpu_max}m", "memory": f"{memory_max}Mi"},
    )

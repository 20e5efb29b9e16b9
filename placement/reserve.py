"""The memory reserve of a shared GPU, and what it leaves for the units sharing it.

Units that share one GPU (MPS and time-slicing replicas, HAMi and Volcano vGPU shares) share its
memory. Some of it must stay free or co-located jobs run out of memory: a fraction of the GPU's
memory (allocator slack, the driver) plus an amount per unit (each CUDA context). The usable
memory of a GPU is its memory minus the fixed part; each unit needs its own memory plus the
per-unit part of that::

    sum over units (memory + per_unit)  <=  gpu_memory - ceil(gpu_memory * percent / 100)

The engine books shares of a GPU in thousandths (milli), so a unit is booked at least the milli
its memory needs of the usable memory (:meth:`Reserve.unit_milli`): no set of units whose milli
sum to at most 1000 can break the inequality above, whatever their sizes.

Under MPS the device plugin's control daemon pins every client to ``gpu_memory / replicas`` of
device memory, a hard limit (gpu-sharing-formats.md §1). A unit is then booked for the larger of
its promise and that cap, so the caps of the units booked on a GPU also sum to at most the usable
memory: the daemon itself keeps the reserve free, and the replicas beyond what is booked stay
unused (the namespace quota never covers them). See docs/sharing.md.

Pure: no Django, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GPU_MILLI = 1000
DEFAULT_PERCENT = 15
DEFAULT_PER_UNIT_MIB = 200


@dataclass(frozen=True)
class Reserve:
    """``percent`` of each shared GPU's memory plus ``per_unit_mib`` for every unit on it."""

    percent: int = DEFAULT_PERCENT
    per_unit_mib: int = DEFAULT_PER_UNIT_MIB

    def __post_init__(self) -> None:
        if not 0 <= self.percent <= 90:
            raise ValueError("the reserve's percent must be within 0..90")
        if self.per_unit_mib < 0:
            raise ValueError("the reserve per unit cannot be negative")

    def fixed_mib(self, gpu_memory_mib: int) -> int:
        """The part of the reserve that does not depend on how many units share the GPU."""
        return math.ceil(gpu_memory_mib * self.percent / 100)

    def usable_mib(self, gpu_memory_mib: int) -> int:
        """What the units of one GPU may book together, per-unit reserve included."""
        return gpu_memory_mib - self.fixed_mib(gpu_memory_mib)

    def total_mib(self, gpu_memory_mib: int, units: int) -> int:
        """The whole reserve of a GPU shared by ``units`` units."""
        return self.fixed_mib(gpu_memory_mib) + units * self.per_unit_mib

    def largest_unit_mib(self, gpu_memory_mib: int, units: int) -> int:
        """The most memory each of ``units`` equal units may have on one GPU (0 or less: none fits)."""
        return self.usable_mib(gpu_memory_mib) // max(1, units) - self.per_unit_mib

    def unit_milli(self, gpu_memory_mib: int, unit_memory_mib: int, *, hard_cap_mib: int = 0) -> int:
        """The thousandths of the GPU a unit must be booked for so the reserve holds: its memory
        (or ``hard_cap_mib``, what the MPS daemon lets it pin, when larger) plus the per-unit
        reserve, as a share of the usable memory, rounded up. More than 1000: it cannot fit at
        all. A GPU of unknown memory (0) limits nothing."""
        if gpu_memory_mib <= 0:
            return 0
        usable = self.usable_mib(gpu_memory_mib)
        needed = max(unit_memory_mib, hard_cap_mib) + self.per_unit_mib
        if usable <= 0:
            return GPU_MILLI + 1
        return math.ceil(GPU_MILLI * needed / usable)

    def units_per_gpu(self, gpu_memory_mib: int, unit_memory_mib: int, *, hard_cap_mib: int = 0) -> int:
        """How many such units one GPU takes under the reserve (its milli alone decides)."""
        milli = self.unit_milli(gpu_memory_mib, unit_memory_mib, hard_cap_mib=hard_cap_mib)
        return GPU_MILLI // milli if milli else 0


def mps_pinned_limit_mib(gpu_memory_mib: int, replicas: int) -> int:
    """The device memory the MPS control daemon lets each client pin: ``total/replicas`` MiB
    (the device plugin's ``set_default_device_pinned_mem_limit``, gpu-sharing-formats.md §1)."""
    return gpu_memory_mib // max(1, replicas)

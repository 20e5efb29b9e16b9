"""The name of a MIG device's profile (``3g.40gb``), as mig-parted and the device plugin spell it.

NVML names a MIG device "<GPU model> MIG <profile>" (``NVIDIA A100-SXM4-80GB MIG 3g.40gb``), which
is the most faithful source because it carries attributes such as ``+me``. When the name does not
have that form, the profile is rebuilt from the device's attributes the way NVIDIA's go-nvlib does:
the instance's share of the GPU memory, rounded up to eighths, times the GPU memory in whole GiB.
"""

from __future__ import annotations

import math
import re

_PROFILE = r"(?:[1-8]c\.)?[1-8]g\.[0-9]{1,4}gb(?:[+-][a-z0-9.,+-]+)?"
_NAME_WITH_PROFILE = re.compile(rf"\bMIG\s+({_PROFILE})\s*$")
_MAX_PROFILE_LENGTH = 32  # as report_schema.json allows
_MIB = 1024 * 1024
_GIB = 1024 * 1024 * 1024
_MEMORY_FRACTION_DENOMINATOR = 8  # MIG memory comes in eighths of the GPU


def profile_from_name(mig_device_name: str | None) -> str | None:
    if not mig_device_name:
        return None
    match = _NAME_WITH_PROFILE.search(mig_device_name)
    if match is None or len(match.group(1)) > _MAX_PROFILE_LENGTH:
        return None
    return match.group(1)


def profile_from_attributes(
    *,
    gpu_instance_slices: int,
    compute_instance_slices: int,
    memory_size_mib: int,
    parent_memory_total_bytes: int,
) -> str | None:
    if gpu_instance_slices < 1 or compute_instance_slices < 1 or parent_memory_total_bytes <= 0:
        return None
    fraction = memory_size_mib * _MIB / parent_memory_total_bytes
    fraction = math.ceil(fraction * _MEMORY_FRACTION_DENOMINATOR) / _MEMORY_FRACTION_DENOMINATOR
    parent_gib = -(-parent_memory_total_bytes // _GIB)
    memory_gb = round(fraction * parent_gib)
    if compute_instance_slices == gpu_instance_slices:
        return f"{gpu_instance_slices}g.{memory_gb}gb"
    return f"{compute_instance_slices}c.{gpu_instance_slices}g.{memory_gb}gb"

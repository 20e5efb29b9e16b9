"""MIG profile names from NVML device names, and rebuilt from attributes."""

from __future__ import annotations

import pytest

from agent.mig_profile import profile_from_attributes, profile_from_name

MiB = 1024**2
A100_80GB = 81920 * MiB
A100_40GB = 40960 * MiB
H100_80GB = 81559 * MiB


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("NVIDIA A100-SXM4-80GB MIG 3g.40gb", "3g.40gb"),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", "1g.10gb+me"),
        ("NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb", "1c.3g.20gb"),
        ("NVIDIA H200 MIG 7g.141gb", "7g.141gb"),
        ("NVIDIA A100-SXM4-80GB", None),
        ("", None),
        (None, None),
    ],
)
def test_profile_from_name(name: str | None, profile: str | None) -> None:
    assert profile_from_name(name) == profile


@pytest.mark.parametrize(
    ("gi_slices", "ci_slices", "memory_mib", "parent_bytes", "profile"),
    [
        (3, 3, 40192, A100_80GB, "3g.40gb"),
        (2, 2, 19968, A100_80GB, "2g.20gb"),
        (1, 1, 9728, A100_80GB, "1g.10gb"),
        (7, 7, 81408, A100_80GB, "7g.80gb"),
        (4, 4, 40192, A100_80GB, "4g.40gb"),
        (1, 1, 4864, A100_40GB, "1g.5gb"),
        (3, 1, 40192, A100_80GB, "1c.3g.40gb"),
        (3, 3, 40448, H100_80GB, "3g.40gb"),
    ],
)
def test_profile_from_attributes(
    gi_slices: int, ci_slices: int, memory_mib: int, parent_bytes: int, profile: str
) -> None:
    assert (
        profile_from_attributes(
            gpu_instance_slices=gi_slices,
            compute_instance_slices=ci_slices,
            memory_size_mib=memory_mib,
            parent_memory_total_bytes=parent_bytes,
        )
        == profile
    )


def test_profile_from_attributes_needs_sensible_inputs() -> None:
    assert (
        profile_from_attributes(
            gpu_instance_slices=0, compute_instance_slices=0, memory_size_mib=1, parent_memory_total_bytes=A100_80GB
        )
        is None
    )
    assert (
        profile_from_attributes(
            gpu_instance_slices=1, compute_instance_slices=1, memory_size_mib=1, parent_memory_total_bytes=0
        )
        is None
    )

"""What dcgm-exporter calls the series the portal reads, per exporter generation.

dcgm-exporter 4.9.0 renamed fields and changed units (percent → ratio, MiB → bytes); the portal
keeps every name it reads in this one map, so that the alert rules (``delivery``) and the
utilisation reader (``telemetry``) agree, and a cluster's exporter can be read whichever
generation it runs. Pure data: no Django, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True)
class DcgmNames:
    """The series of one exporter generation and the factor that brings each to the portal's unit
    (busy fraction 0..1 for activity, bytes for memory)."""

    generation: str
    sm_active: str  # ratio 0..1 (may exceed 1 on MIG: clamp)
    gr_engine_active: str  # ratio 0..1
    gpu_util: str  # "a kernel ran"; not supported on MIG
    gpu_util_to_ratio: float
    fb_used: str
    fb_used_to_bytes: float
    fb_free: str
    fb_free_to_bytes: float


LEGACY = DcgmNames(
    generation="pre-4.9",
    sm_active="DCGM_FI_PROF_SM_ACTIVE",
    gr_engine_active="DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    gpu_util="DCGM_FI_DEV_GPU_UTIL",
    gpu_util_to_ratio=0.01,
    fb_used="DCGM_FI_DEV_FB_USED",
    fb_used_to_bytes=float(MIB),
    fb_free="DCGM_FI_DEV_FB_FREE",
    fb_free_to_bytes=float(MIB),
)

# Newest first: a reader tries each generation's names and keeps what answers.
GENERATIONS: tuple[DcgmNames, ...] = (LEGACY,)

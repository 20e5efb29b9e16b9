"""What dcgm-exporter calls the series the portal reads, per exporter generation.

dcgm-exporter 4.9.0 renamed fields and changed units (percent → ratio, MiB → bytes); the portal
keeps every name it reads in this one map, so that the alert rules (``delivery``) and the
utilisation reader (``telemetry.usage``) agree, and a cluster's exporter can be read whichever
generation it runs: the reader asks for every generation's names at once and keeps, per device,
the newest generation that answered, converting through the factors below. Pure data: no Django,
no I/O.

The 4.9+ names are UNVERIFIED: the 4.9.0 release notes were not at hand. They are DCGM's own
field names under its "field naming standard" (``DCGM_FI_PROF_SM_ACTIVE`` became
``DCGM_FI_PROF_SM_UTIL_RATIO``, ``DCGM_FI_DEV_FB_USED`` has a byte-exact ``DCGM_FI_DEV_FB_USED_BYTES``),
which is what the exporter is expected to publish from 4.9.0 on. Correcting one is a one-line
change here; docs/observability.md ("Utilisation per allocation: sources") says the same.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024

# The activity series in the order the portal trusts them: SM activity, else graphics engine
# activity, else GPU utilisation ("a kernel ran", not supported on MIG).
ACTIVITY_FIELDS: tuple[str, ...] = ("sm_active", "gr_engine_active", "gpu_util")


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
    verified: bool = True  # False: the names are not confirmed from the exporter's release notes

    def activity_series(self) -> tuple[tuple[str, str, float], ...]:
        """``(field, series name, factor to a ratio)`` for each activity series, most trusted first."""
        return (
            ("sm_active", self.sm_active, 1.0),
            ("gr_engine_active", self.gr_engine_active, 1.0),
            ("gpu_util", self.gpu_util, self.gpu_util_to_ratio),
        )


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

# UNVERIFIED (see the module's docstring): names and units of dcgm-exporter 4.9.0 and later.
CURRENT = DcgmNames(
    generation="4.9+",
    sm_active="DCGM_FI_PROF_SM_UTIL_RATIO",  # UNVERIFIED
    gr_engine_active="DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",  # UNVERIFIED
    gpu_util="DCGM_FI_DEV_GPU_UTIL_RATIO",  # UNVERIFIED (name and the ratio unit)
    gpu_util_to_ratio=1.0,
    fb_used="DCGM_FI_DEV_FB_USED_BYTES",  # UNVERIFIED
    fb_used_to_bytes=1.0,
    fb_free="DCGM_FI_DEV_FB_FREE_BYTES",  # UNVERIFIED
    fb_free_to_bytes=1.0,
    verified=False,
)

# Newest first: a reader tries each generation's names and keeps what answers.
GENERATIONS: tuple[DcgmNames, ...] = (CURRENT, LEGACY)


def generation_named(name: str) -> DcgmNames:
    """The generation called ``name`` (``KeyError`` for an unknown one)."""
    for names in GENERATIONS:
        if names.generation == name:
            return names
    raise KeyError(name)

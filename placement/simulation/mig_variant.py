"""Benchmark B2: the trace with every GPU in MIG mode (``placement-benchmark.md`` §7 B2).

A sharing pod asking ``gpu_milli`` becomes the smallest profile with at least
ceil(gpu_milli x 7 / 1000) compute slices among 1g/2g/3g/4g/7g of the 80 GB geometry;
whole-GPU pods take entire GPUs (``7g.80gb`` each). Demand is measured in compute slices.
"""

from __future__ import annotations

import math

from ..decisions import Request, RequestKind
from ..inventory import GPU_MILLI
from ..mig import COMPUTE_SLICES

MIG_GEOMETRY = "A100-80GB"
PROFILE_BY_COMPUTE = {1: "1g.10gb", 2: "2g.20gb", 3: "3g.40gb", 4: "4g.40gb", 7: "7g.80gb"}


def profile_for_share(gpu_milli: int) -> str:
    need = math.ceil(gpu_milli * COMPUTE_SLICES / GPU_MILLI)
    return PROFILE_BY_COMPUTE[min(c for c in PROFILE_BY_COMPUTE if c >= need)]


def to_mig(pod: Request) -> Request:
    kind = pod.kind
    if kind is RequestKind.CPU_ONLY:
        return pod
    profile = profile_for_share(pod.gpu_milli) if kind is RequestKind.SHARED else PROFILE_BY_COMPUTE[7]
    return Request(pod.cpu_milli, pod.memory_mib, pod.gpu_count, 0, profile, pod.allowed_models, name=pod.name)

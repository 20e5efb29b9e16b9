"""What both sources share: the priority classes (the demo's three), the flavors a GPU share maps
to, the department names and their deterministic choice, and a policy of guarantees."""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Decimal

from twin.policy import Department, Policy, PriorityClass
from twin.workload import GPU_MILLI, Shape

DEPARTMENTS = ("nlp", "vision", "speech", "recsys", "robotics", "research", "platform", "ads")
# The demo's classes (demo/seed.py): guaranteed production work, the default, and preemptible work
# that may run 50 % over quota and is reclaimed without notice.
CLASSES = (
    PriorityClass("gpu-production", 100000, True, Decimal(1), 15 * 60.0),
    PriorityClass("gpu-standard", 10000, True, Decimal(1), 5 * 60.0),
    PriorityClass("gpu-preemptible", 1000, False, Decimal("1.5"), 0.0),
)
SHARE_STEP = 100  # a GPU share is booked as the HAMi-style flavor of the next tenth of a GPU


def flavor_for(num_gpu: int, gpu_milli: int) -> tuple[str, Shape]:
    """The catalogue flavor of a unit: ``share-<milli>`` (a share rounded up to the next tenth of a
    GPU) for a part of one GPU, ``gpu-<n>`` for whole GPUs."""
    if gpu_milli < GPU_MILLI:
        milli = min(GPU_MILLI, SHARE_STEP * math.ceil(gpu_milli / SHARE_STEP))
        if milli < GPU_MILLI:
            return f"share-{milli}", Shape(1, milli)
    return f"gpu-{num_gpu}", Shape(num_gpu)


def flavors() -> dict[str, Shape]:
    shares = dict(flavor_for(1, milli) for milli in range(SHARE_STEP, GPU_MILLI, SHARE_STEP))
    return shares | dict(flavor_for(n, GPU_MILLI) for n in (1, 2, 4, 8))


def zipf_weights(count: int, skew: float) -> list[float]:
    """Department ``k`` (0-based) weighs ``1 / (k + 1) ** skew``, normalised to sum 1."""
    raw = [1.0 / (k + 1) ** skew for k in range(count)]
    return [w / sum(raw) for w in raw]


def department_of(name: str, weights: Sequence[float]) -> int:
    """The department of a task named ``name``: CRC-32 of the name, read as a fraction of 2**32,
    falls into one department's slice of [0, 1) (slices as wide as ``weights``, in order)."""
    point = zlib.crc32(name.encode()) / 2**32
    running = 0.0
    for index, weight in enumerate(weights):
        running += weight
        if point < running:
            return index
    return len(weights) - 1


def policy_for(names: Sequence[str], guarantees: Sequence[float], installed: int, *, limit_share: float = 1.0) -> Policy:
    """Departments guaranteed ``guarantees`` (shares of the installed GPUs, summing to at most 1),
    each limited to ``limit_share`` of the installed GPUs; the three classes; the flavors."""
    departments = tuple(
        Department(name, Decimal(share * installed).quantize(Decimal("0.01"), ROUND_HALF_UP),
                   Decimal(max(share, limit_share) * installed).quantize(Decimal("0.01"), ROUND_HALF_UP))
        for name, share in zip(names, guarantees, strict=True)
    )
    return Policy(departments, {c.name: c for c in CLASSES}, flavors())

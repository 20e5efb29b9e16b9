"""A GPU as a picture over an interval shows it, from what its bookings hold (``placement.peaks``).

One rule for the portal's pictures (``allocations.booking.view``) and the twin's booking ahead
(``twin.replay.ahead``): a GPU whose bookings are MIG instances that can exist as booked is in
MIG mode with them (each held over its span: ``MigGeometry.held``); one whose instances cannot
(two on one memory slice at one instant, an unknown profile) or that also holds a share at some
instant is shown full; otherwise it holds the most share held at one instant, at most the whole.
"""

from __future__ import annotations

from collections.abc import Sequence

from .inventory import GPU_MILLI, Gpu, MigSlice
from .mig import MigGeometry


def instances_problem(geometry: MigGeometry, slices: Sequence[MigSlice]) -> str | None:
    """Why the MIG instances cannot exist as booked on one GPU, or None where they can."""
    try:
        geometry.held(slices)
    except (ValueError, KeyError) as problem:
        return str(problem)
    return None


def held_gpu(gpu: Gpu, *, geometry: MigGeometry | None, milli: int, slices: Sequence[MigSlice],
             mig_mode_when_empty: bool = False, instances_exist: bool | None = None) -> Gpu:
    """``gpu`` (its index, model and memory) holding ``milli`` (the most share at one instant) and
    ``slices``; ``geometry``: its MIG geometry where it is MIG-capable. ``instances_exist``: the
    caller's :func:`instances_problem` answer where it already asked (to report it)."""
    if not milli and not slices:
        if mig_mode_when_empty and geometry is not None:
            return Gpu(gpu.index, gpu.model, gpu.memory_mib, 0, geometry.name)
        return Gpu(gpu.index, gpu.model, gpu.memory_mib, 0)
    if slices:
        if geometry is not None and not milli:
            exist = instances_problem(geometry, slices) is None if instances_exist is None else instances_exist
            if exist:
                return Gpu(gpu.index, gpu.model, gpu.memory_mib, 0, geometry.name, tuple(slices))
        return Gpu(gpu.index, gpu.model, gpu.memory_mib, GPU_MILLI)  # held whole at some instant
    return Gpu(gpu.index, gpu.model, gpu.memory_mib, min(milli, GPU_MILLI))  # a share held: never carved

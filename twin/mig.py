"""MIG instances in the twin: what a profile weighs in GPU-equivalents and which GPU models have it.

The portal stores each MIG flavor's GPU-equivalents (``Flavor.gpu_equivalents``); its catalogue
(the demo's ``demo/seed.py``) weighs an instance as the larger of its two fractions of the GPU,
compute slices of 7 and memory slices of 8, to four decimals: ``1g.10gb`` on an A100 80GB is
max(1/7, 1/8) = 0.1429, ``3g.40gb`` max(3/7, 4/8) = 0.5. The twin derives a MIG unit's weight the
same way (``mig_equivalents``), so a catalogue written from the twin's flavors weighs what the
demo's does.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Decimal

from placement.mig import COMPUTE_SLICES, GEOMETRIES, MEMORY_SLICES, MigGeometry, geometry_for_model

FOUR_PLACES = Decimal("0.0001")
_LARGE_MEMORY_MIB = 80 * 1024  # geometry_for_model tells an A100's two variants apart by memory


class MigAskError(ValueError):
    """Why no instance of a profile exists as asked; ``field`` names what to change."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def mig_equivalents(compute: int, memory_slices: int) -> Decimal:
    """One instance's weight: the larger of compute ÷ 7 and memory slices ÷ 8, to four decimals."""
    weight = max(Decimal(compute) / COMPUTE_SLICES, Decimal(memory_slices) / MEMORY_SLICES)
    return weight.quantize(FOUR_PLACES, ROUND_HALF_UP)


def model_geometries(model: str) -> set[MigGeometry]:
    """The MIG geometries a GPU model may have (an A100 without its memory in the name: both, as
    the portal tells them apart by the GPU's memory)."""
    found = {geometry_for_model(model)}
    if "40" not in model and "80" not in model:
        found.add(geometry_for_model(model, _LARGE_MEMORY_MIB))
    return {geometry for geometry in found if geometry is not None}


def profile_weight(profile: str, models: Iterable[str]) -> Decimal:
    """The GPU-equivalents of one ``profile`` instance on a GPU of ``models`` (empty: any model).
    ``MigAskError`` says why there is none: a model without MIG (``gpu_model``), a profile unknown,
    not on the model, or of different sizes on the geometries it may be on (``mig_profile``)."""
    models = sorted(models)
    geometries: set[MigGeometry] = set()
    if models:
        for model in models:
            found = model_geometries(model)
            if not found:
                raise MigAskError("gpu_model", f"GPU model {model!r} has no MIG geometry")
            having = {geometry for geometry in found if profile in geometry.by_name}
            if not having:
                known = sorted({name for geometry in found for name in geometry.by_name})
                raise MigAskError("mig_profile", f"GPU model {model!r} has no MIG profile {profile!r} (known: {', '.join(known)})")
            geometries |= having
    else:
        geometries = {geometry for geometry in GEOMETRIES.values() if profile in geometry.by_name}
        if not geometries:
            known = sorted({name for geometry in GEOMETRIES.values() for name in geometry.by_name})
            raise MigAskError("mig_profile", f"no MIG geometry has a profile {profile!r} (known: {', '.join(known)})")
    weights = {mig_equivalents(g.by_name[profile].compute, g.by_name[profile].memory_slices) for g in geometries}
    if len(weights) > 1:
        names = ", ".join(sorted(g.name for g in geometries))
        raise MigAskError("mig_profile", f"{profile!r} has different sizes on {names}: name the model (gpu_model)")
    return weights.pop()

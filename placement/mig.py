"""MIG geometry: profile sizes, legal start slots and per-GPU layout arithmetic.

Facts come from ``../shared/reference/gpu-sharing-formats.md`` §2 (``nvidia-smi mig -lgipp``):
a MIG GPU has 8 memory slices and 7 compute (SM) slices; a GPU instance occupies a contiguous
range of memory slices that must begin at one of the profile's allowed starts. The reference
marks the H200 placements as unverified (identical fractions assumed); we follow it.

A GPU's MIG state is kept as a small integer triple (occupied-memory bitmask, used compute
slices, number of ``+me`` instances), so every legality question is a table lookup.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from .inventory import MigSlice
from .peaks import at_one_instant, sweep

MEMORY_SLICES = 8
COMPUTE_SLICES = 7


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile of a geometry, e.g. ``3g.40gb``."""

    name: str
    compute: int
    memory_slices: int
    starts: tuple[int, ...]
    max_count: int
    media_extensions: bool = False

    def slice_mask(self, start: int) -> int:
        """Bitmask of the memory slices an instance started at ``start`` occupies."""
        return ((1 << self.memory_slices) - 1) << start


@dataclass(frozen=True)
class MigState:
    """The occupancy of one MIG GPU (what the layout leaves free)."""

    mask: int = 0
    compute: int = 0
    media: int = 0

    @property
    def free_compute(self) -> int:
        return COMPUTE_SLICES - self.compute


@dataclass(frozen=True)
class MigGeometry:
    """The MIG profile table of one GPU model."""

    name: str
    profiles: tuple[MigProfile, ...]

    @cached_property
    def by_name(self) -> dict[str, MigProfile]:
        return {p.name: p for p in self.profiles}

    def profile(self, name: str) -> MigProfile:
        try:
            return self.by_name[name]
        except KeyError:
            known = ", ".join(p.name for p in self.profiles)
            raise KeyError(f"{self.name} has no MIG profile {name!r} (known: {known})") from None

    def legal_starts(self, state: MigState, profile: MigProfile) -> tuple[int, ...]:
        """Starts where ``profile`` can be created on a GPU in ``state``.

        Legal means: the memory-slice range is free, the compute slices still fit within 7,
        and the per-GPU count limit of ``+me`` profiles is respected (reference §2).
        """
        if state.compute + profile.compute > COMPUTE_SLICES:
            return ()
        if profile.media_extensions and state.media >= 1:
            return ()
        return tuple(s for s in profile.starts if state.mask & profile.slice_mask(s) == 0)

    def add(self, state: MigState, profile: MigProfile, start: int) -> MigState:
        """State after creating ``profile`` at ``start``; raises if that is not legal."""
        if start not in self.legal_starts(state, profile):
            raise ValueError(f"{profile.name} cannot start at memory slice {start} on this GPU")
        return MigState(
            state.mask | profile.slice_mask(start),
            state.compute + profile.compute,
            state.media + int(profile.media_extensions),
        )

    def held(self, slices: Sequence[MigSlice]) -> MigState:
        """What the instances occupy over their spans, for a new instance that must fit beside them
        at every instant: every memory slice any of them takes, and the most compute slices and
        ``+me`` instances held at one instant. Instances that never overlap in time may share
        memory slices; two on one slice at one instant raise ``ValueError`` (the GPU booked twice),
        an unknown profile ``KeyError``."""
        profiles = [self.profile(item.profile) for item in slices]
        if at_one_instant([item.during for item in slices]):
            state = MigState()
            for item, profile in zip(slices, profiles, strict=True):
                state = self.add(state, profile, item.start)
            return state
        mask = compute = media = 0
        now = MigState()
        for position, begins in sweep([item.during for item in slices]):
            item, profile = slices[position], profiles[position]
            if begins:
                now = self.add(now, profile, item.start)
                mask |= now.mask
                compute, media = max(compute, now.compute), max(media, now.media)
            else:
                now = self.remove(now, profile, item.start)
        return MigState(mask, compute, media)

    def remove(self, state: MigState, profile: MigProfile, start: int) -> MigState:
        """State after destroying the instance of ``profile`` at ``start``."""
        m = profile.slice_mask(start)
        if state.mask & m != m:
            raise ValueError(f"no {profile.name} instance at memory slice {start}")
        return MigState(
            state.mask & ~m,
            state.compute - profile.compute,
            state.media - int(profile.media_extensions),
        )


@dataclass(frozen=True)
class _ProfileNames:
    """What one geometry calls its profiles, from the smallest slice to the whole GPU."""

    one: str
    one_double: str  # one compute slice, two memory slices
    two: str
    three: str
    four: str
    seven: str


def _geometry(name: str, names: _ProfileNames) -> MigGeometry:
    return MigGeometry(
        name,
        (
            MigProfile(names.one, 1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
            MigProfile(names.one + "+me", 1, 1, (0, 1, 2, 3, 4, 5, 6), 1, media_extensions=True),
            MigProfile(names.one_double, 1, 2, (0, 2, 4, 6), 4),
            MigProfile(names.two, 2, 2, (0, 2, 4), 3),
            MigProfile(names.three, 3, 4, (0, 4), 2),
            MigProfile(names.four, 4, 4, (0,), 1),
            MigProfile(names.seven, 7, 8, (0,), 1),
        ),
    )


GEOMETRIES: dict[str, MigGeometry] = {
    g.name: g
    for g in (
        _geometry("A100-40GB", _ProfileNames("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")),
        _geometry("A100-80GB", _ProfileNames("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
        _geometry("H100-80GB", _ProfileNames("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
        _geometry("H200", _ProfileNames("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")),
    )
}


@functools.cache
def geometry_for_model(model: str, memory_mib: int = 0) -> MigGeometry | None:
    """Best-effort mapping from a GPU model string to its MIG geometry (None if not MIG-capable).

    ``memory_mib`` separates the two A100 variants when the model string does not.
    """
    m = model.upper().replace(" ", "")
    if "H200" in m:
        return GEOMETRIES["H200"]
    if "H100" in m:
        if "NVL" in m or "94" in m or "96" in m:
            return None  # different profile table; not modelled
        return GEOMETRIES["H100-80GB"]
    if "A100" in m:
        if "80" in m or memory_mib > 48 * 1024:
            return GEOMETRIES["A100-80GB"]
        return GEOMETRIES["A100-40GB"]
    return GEOMETRIES.get(model)


def mig_layout_starts(geometry: MigGeometry, profiles: Mapping[str, int]) -> list[MigSlice] | None:
    """Where ``profiles`` (instance counts) sit on one GPU: the first legal arrangement, largest
    instances first, or None when they cannot be there at once. An exhaustive search over legal
    starts; at most 7 instances, so it is tiny. An unknown profile raises KeyError naming the
    known ones. The renderer accepts a layout with it and the adapter finds pinned instances
    with it, so both agree on what fits."""
    wanted: list[str] = []
    for name, count in profiles.items():
        geometry.profile(name)
        wanted.extend([name] * count)
    wanted.sort(key=lambda name: (-geometry.profile(name).memory_slices, -geometry.profile(name).compute, name))

    def place(index: int, state: MigState, taken: list[MigSlice]) -> list[MigSlice] | None:
        if index == len(wanted):
            return taken
        profile = geometry.profile(wanted[index])
        for start in geometry.legal_starts(state, profile):
            found = place(index + 1, geometry.add(state, profile, start), [*taken, MigSlice(profile.name, start)])
            if found is not None:
                return found
        return None

    return place(0, MigState(), [])


def mig_compute(profile: str) -> int:
    """Compute slices of a MIG profile, whatever the GPU model."""
    for geo in GEOMETRIES.values():
        if profile in geo.by_name:
            return geo.by_name[profile].compute
    raise KeyError(f"unknown MIG profile {profile!r}")

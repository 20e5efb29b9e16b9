"""The units a reclaim takes from MIG GPUs kept on them until their notice ends, for everyone else
(``DecidingReplay``'s overlay, ``twin.replay.decisions``), as the portal's picture holds them.

The portal's picture holds a victim's rows over its whole interval, which the request it was taken
for (booked from the end of the notice) shares: where an instance leaving sits on slices now booked
to another, the two cannot be held at once and the portal shows the GPU full
(``allocations.booking.view``, ``_instances_fit``), as it does a GPU holding both an instance and a
share. Here the leaving instances are booked again where they fit; where one does not, or a share
leaves a MIG-mode GPU, the GPU's free slices are filled (``_fill``) until no profile fits.
"""

from __future__ import annotations

from placement import Cluster, Placement, Request
from placement.mig import GEOMETRIES
from placement.mig_tables import GEOMETRY_NAMES, NO_MIG, decode
from twin.replay.world import World

GpuKey = tuple[int, str, int]  # (pool, node, GPU index)


class MigOverlay:
    """The MIG side of the overlay: ``_want_mig`` the instances leaving each GPU, ``_have_mig``
    what is booked on it for them (the instances again, or the filling)."""

    world: World
    _want: dict[GpuKey, int]
    _want_mig: dict[GpuKey, list[Placement]]
    _have_mig: dict[GpuKey, list[Placement]]
    _mig_gpu_sets: dict[int, set[tuple[str, int]]]

    def _mig_gpus(self, pool: int) -> set[tuple[str, int]]:
        """The (node, GPU index) of the pool's GPUs on MIG nodes."""
        known = self._mig_gpu_sets.get(pool)
        if known is None:
            cluster = self.world.pools.clusters[pool]
            known = self._mig_gpu_sets[pool] = {(cluster.names[row], int(cluster.gpu_label[row, slot]))
                                                for row, slot in self.world.pools.modes[pool].geometry}
        return known

    def _settle_mig(self, key: GpuKey) -> None:
        """The MIG instances leaving from one GPU booked on it again. The portal's picture holds
        a victim's rows over its whole interval, which the request it was taken for (from the end
        of the notice) shares: where an instance leaving sits on slices now booked to another, the
        two cannot be held at once and the portal shows the GPU full (``allocations.booking.view``,
        ``_instances_fit``), as it does a GPU holding both an instance and a share; here the GPU's
        free slices are then filled (``_fill``)."""
        pool, node, gpu = key
        cluster, modes = self.world.pools.clusters[pool], self.world.pools.modes[pool]
        booked = self._have_mig.pop(key, [])
        for unit in reversed(booked):
            cluster.release(unit)
        modes.settle(booked)
        again: list[Placement] = []
        row = cluster.index[node]
        slot = cluster._slot[row][gpu]
        conflict = self._want.get(key, 0) > 0 and cluster.mig_state[row, slot] != NO_MIG
        for unit in self._want_mig.get(key, []):
            modes.ready(unit)
            if cluster.check(unit) is None:
                cluster.apply(unit)
                again.append(unit)
            else:
                conflict = True
                modes.settle([unit])
        if conflict and cluster.mig_state[row, slot] != NO_MIG:
            again.extend(_fill(cluster, node, gpu))
        if again:
            self._have_mig[key] = again


def _fill(cluster: Cluster, node: str, gpu: int) -> list[Placement]:
    """Instances booked on a MIG-mode GPU's free slices, the smallest first, until no profile
    fits there: the GPU shown full."""
    row = cluster.index[node]
    slot = cluster._slot[row][gpu]
    geometry = GEOMETRIES[GEOMETRY_NAMES[decode(int(cluster.mig_state[row, slot]))[0]]]
    filled: list[Placement] = []
    for profile in sorted(geometry.profiles, key=lambda p: (p.compute, p.memory_slices, p.name)):
        request = Request(0, 0, 1, 1000, profile.name)
        while starts := cluster.legal_mig_starts(row, slot, request):
            filled.append(cluster.apply(Placement(request, node, (gpu,), (starts[0],))))
    return filled

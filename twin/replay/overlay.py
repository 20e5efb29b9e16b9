"""The units a reclaim takes kept on their GPUs for everyone else until their notice ends
(``DecidingReplay``'s overlay, ``twin.replay.decisions``; its MIG side: ``mig_overlay``), as the
portal's picture holds every live booking over a request's interval."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from placement import Placement, Request
from twin.replay.mig_overlay import GpuKey, MigOverlay


class Overlay(MigOverlay):
    """The leaving units' overlay: ``_want`` the thousandths leaving each GPU, ``_have`` the
    booking made on it for them."""

    _have: dict[GpuKey, Placement]
    _models: dict[GpuKey, frozenset[str]]
    _pool_release: Callable[[int, Iterable[Placement]], None]

    def _overlay_rebuild(self) -> None:
        """The units a reclaim takes stay on their GPUs for everyone else until their notice ends
        (the victim still runs there), next to the units booked for the request they were taken
        for: the portal's picture of a GPU holds every live booking over the request's interval,
        at most the whole GPU (``allocations.booking.view``). The replay takes them off the GPUs
        at once; here they are put back on top (an *overlay*, one booking per GPU), each GPU filled
        at most to the whole, and the overlay follows every unit that leaves or comes back to a GPU
        while the try goes on (the victim choice's cuts)."""
        want: dict[GpuKey, int] = {}
        want_mig: dict[GpuKey, list[Placement]] = {}
        for holding in self.world.holdings.values():
            for unit in holding.units[len(holding.units) - holding.leaving:] if holding.leaving and not holding.parked else ():
                if unit.request.mig_profile is not None:
                    want_mig.setdefault((holding.pool, unit.node, unit.gpu_indices[0]), []).append(unit)
                    continue
                for gpu in unit.gpu_indices:
                    key = (holding.pool, unit.node, gpu)
                    want[key] = want.get(key, 0) + unit.request.gpu_milli
                    self._models[key] = unit.request.allowed_models
        keys = set(want) | set(self._want)
        self._want = want
        for key in keys:
            self._settle(key)
        mig_keys = set(want_mig) | set(self._want_mig) | set(self._have_mig) | {
            key for key in want if key[1:] in self._mig_gpus(key[0])}
        self._want_mig = want_mig
        for key in mig_keys:
            self._settle_mig(key)

    def _settle(self, key: GpuKey) -> None:
        """The overlay on one GPU: what leaves from it, at most what is free."""
        pool, node, gpu = key
        cluster = self.world.pools.clusters[pool]
        booked = self._have.pop(key, None)
        if booked is not None:
            cluster.release(booked)
        free = int(cluster.gpu_free[cluster.index[node], cluster._slot[cluster.index[node]][gpu]])
        milli = min(self._want.get(key, 0), free)
        if milli > 0:
            booked = Placement(Request(0, 0, 1, milli, None, self._models.get(key, frozenset())), node, (gpu,))
            cluster.apply(booked)
            self._have[key] = booked

    def _keys(self, pool: int, units: Iterable[Placement]) -> list[GpuKey]:
        return [(pool, unit.node, gpu) for unit in units for gpu in unit.gpu_indices]

    def _release_settling(self, pool: int, units: Iterable[Placement]) -> None:
        units = list(units)
        self._pool_release(pool, units)
        for key in self._keys(pool, units):
            if key in self._want:
                self._settle(key)
            if key in self._want_mig or key in self._have_mig:
                self._settle_mig(key)

    def _apply_making_room(self, pool: int, units: Iterable[Placement]) -> None:
        pools = self.world.pools
        cluster = pools.clusters[pool]
        for unit in units:
            keys = [key for key in self._keys(pool, [unit]) if key in self._have]
            for key in keys:
                cluster.release(self._have.pop(key))
            mig_keys = [key for key in self._keys(pool, [unit]) if key in self._have_mig]
            for key in mig_keys:
                booked = self._have_mig.pop(key)
                for overlay in reversed(booked):
                    cluster.release(overlay)
                pools.modes[pool].settle(booked)
            if pools.modes[pool]:
                pools.modes[pool].ready(unit)
            cluster.apply(unit)
            for key in keys:
                self._settle(key)
            for key in mig_keys:
                self._settle_mig(key)

"""The victim choice's capacity callback on the pools of now (``World.cut_view``)."""

from __future__ import annotations

from allocations.quotas import victims
from placement import Placement, Request
from twin.replay.state import Holding, Pools


class CutView:
    """The pool as it would be without some grants' units, for the victim choice's capacity
    callback: the units of the cut asked last stay released, so that the next cut (the plan adds,
    drops or trims one victim at a time) costs only its difference. ``restore`` puts every unit
    back; nothing else may book on the pool in between."""

    def __init__(self, pools: Pools, holdings: dict[int, Holding], pool: int) -> None:
        self.pools, self.holdings, self.pool = pools, holdings, pool
        self.released: dict[int, list[Placement]] = {}
        self.last: victims.Cut = frozenset()

    def _put_back(self, gid: int) -> None:
        self.pools.apply(self.pool, self.released.pop(gid))

    def _take(self, gid: int, units: int) -> None:
        holding = self.holdings[gid]
        end = len(holding.units) - holding.leaving
        gone = holding.units[end - units:end]
        self.pools.release(self.pool, gone)
        self.released[gid] = gone

    def fits(self, request: Request, quantity: int, cut: victims.Cut) -> bool:
        """Whether ``quantity`` units of ``request`` fit once the units of ``cut`` (grant id, units:
        the last ones before those already leaving) are gone."""
        for gid, _ in self.last - cut:
            if gid in self.released:
                self._put_back(gid)
        for gid, units in cut - self.last:
            if self.holdings[gid].pool == self.pool:
                self._take(gid, units)
        self.last = cut
        if quantity == 1:  # one unit fits where the engine finds a feasible node: no need to choose one
            return self.pools.fits(self.pool, request)
        placed = self.pools.place_all(self.pool, request, quantity)
        if placed is not None:
            self.pools.release(self.pool, placed)
        return placed is not None

    def restore(self) -> None:
        for gid in list(self.released):
            self._put_back(gid)
        self.last = frozenset()

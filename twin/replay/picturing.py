"""A decision taken on the picture of its own period (``twin.replay.ahead``): the replay's world
asked as it stands, but for its pools, its shortcuts and its victim choice's cuts."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from placement import Node
from twin.replay.ahead import Booked, Cut, Picture, PictureCut
from twin.replay.modes import Mode, PassMemo, Reclaim, Start, admit
from twin.replay.records import Promise
from twin.replay.state import Pools
from twin.replay.world import World
from twin.workload import Job


def admit_on_picture(mode: Mode, world: World, job: Job, memo: PassMemo, depth: int,
                     build: Callable[[Cut], Pools]) -> Start | Reclaim | None:
    """``modes.admit`` on the GPUs as the request's period sees them (``build(cut)``: the picture
    without the units of ``cut``): the quotas weighed over its period (``World.picturing``), the
    shortcuts of the picture of now off, the victim choice's cuts asked of the picture made again
    without them. Its own memo: what fails on one period's picture says nothing of another's."""
    real, shortcuts = world.pools, world.shortcuts
    scratch = PassMemo(reclaim_tries=memo.reclaim_tries)
    world.pools, world.picturing, world.shortcuts = build(frozenset()), True, False
    world.picture_cut = PictureCut(build)  # nothing the world keeps reads the pools: no version to bump
    try:
        return admit(mode, world, job, scratch, depth)
    finally:
        world.pools, world.shortcuts = real, shortcuts
        world.picturing, world.picture_cut = False, None
        memo.reclaim_tries, memo.skipped = scratch.reclaim_tries, scratch.skipped


def period_pictures(world: World, promises: list[Promise], nodes: Sequence[Node],
                    interval: tuple[float, float]) -> Callable[[Cut], Pools]:
    """The pictures of ``interval`` (``ahead.Picture``) as the victim choice asks them: a copy of
    the picture without the units of each cut."""
    picture = Picture(nodes, world.pools, bookings(world, promises), interval, world.pools.policies[0])

    def build(cut: Cut) -> Pools:
        if not cut:
            return picture.pools()
        return picture.pools(bookings(world, promises, cut), cut_nodes(world, cut))

    return build


def bookings(world: World, promises: Iterable[Promise], cut: Cut = frozenset()) -> list[Booked]:
    """Every unit booked, with its grant's period: the grants holding (the units a reclaim takes
    too, until they leave), those booked where their victims were (from their reclaim), those
    approved ahead; less the units of ``cut`` (of a grant, its last ones before those leaving).
    ``Booked.now``: a unit the pools of now hold as the picture does."""
    taken = dict(cut)
    booked: list[Booked] = []
    for holding in [*world.holdings.values(), *world.scheduled.values()]:
        units = holding.units
        count = taken.get(holding.gid, 0)
        end = len(units) - holding.leaving
        span = (holding.since, holding.asked_end)
        scheduled = holding.gid in world.scheduled
        booked.extend(Booked(unit, span, not scheduled) for unit in units[:end - count])
        booked.extend(Booked(unit, span, holding.parked) for unit in units[end:])  # leaving: off the pools unless parked
    for promise in promises:
        if promise.entry is not None and promise.start is not None:
            span = (promise.decided, promise.decided + promise.entry.job.requested_s)
            booked.extend(Booked(unit, span, True) for unit in promise.start.units)
    return booked


def cut_nodes(world: World, cut: Cut) -> set[str]:
    """The nodes a cut's grants hold units on (a picture rebuilds them without the cut's units)."""
    nodes: set[str] = set()
    for gid, _ in cut:
        holding = world.holdings.get(gid) or world.scheduled.get(gid)
        if holding is not None:
            nodes.update(unit.node for unit in holding.units)
    return nodes

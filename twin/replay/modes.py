"""The four policies, each a way to decide whether a waiting request starts now (docs/twin.md):

* ``static``: static exclusive partitioning, the seeds' "before": each department owns whole nodes
  in proportion to its guarantee (``state.partition``), a share of a GPU takes the whole GPU, and
  nothing is borrowed: a request starts when its department's own GPUs have room.
* ``pool``: one shared pool, first come first served, no quotas: a request starts when the GPUs
  have room (waiting requests in submission order, whatever their priority).
* ``borrow``: the portal's quota checks (``algebra.checks_from_totals``: a department may borrow
  up to its limit what others leave idle), but nothing is ever reclaimed.
* ``full``: the portal's policy: the same checks, and when they or the GPUs refuse, the victim
  choice of ``allocations.quotas.victims.plan`` (borrowed grants reclaimed for a request within
  its guarantee, grants beyond a limit, lower priorities for a class that preempts), the GPUs asked
  through the same capacity callback as the portal's admission (``room_facts`` for room; where
  the GPUs refuse a request within its guarantee whose quota victims could free, room on one
  node, ``node_room_plan``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

from allocations.quotas import algebra, victim_view, victims
from allocations.quotas.node_room import node_room_plan
from placement import Placement, Request
from twin.replay.periods import Weighed
from twin.replay.shortcuts import RoomBound
from twin.replay.state import unit_request
from twin.replay.world import World
from twin.workload import Job

POLICIES = ("static", "pool", "borrow", "full")
PER_MILLI = Decimal("0.001")


@dataclass(frozen=True)
class Mode:
    name: str
    whole: bool = False  # a share books the whole GPU
    quotas: bool = False
    reclaims: bool = False
    by_priority: bool = True  # waiting requests ordered by priority first (else by submission only)
    partitioned: bool = False


MODES = {
    "static": Mode("static", whole=True, partitioned=True),
    "pool": Mode("pool", by_priority=False),
    "borrow": Mode("borrow", quotas=True),
    "full": Mode("full", quotas=True, reclaims=True),
    # Not a policy compared: each department alone on its guarantee's share of the nodes, units
    # booked as they ask (the baseline of finish-time fairness, ``twin.replay.fairness``).
    "alone": Mode("alone", partitioned=True),
}


@dataclass(frozen=True)
class Start:
    units: list[Placement]
    per_unit: Decimal
    pool: int


@dataclass(frozen=True)
class Reclaim:
    victims: tuple[algebra.Victim, ...]
    request: Request
    per_unit: Decimal
    pool: int


@dataclass
class PassMemo:
    """What failed in this pass of the queue, which nothing in the same pass can make fit again
    (within a pass grants only start, and a reclaim frees nothing before its notice ends), until
    the replay says otherwise (``forget``). The plain replay's victims leave the GPUs when their
    reclaim is decided: what its request does not take of their room waits for the next pass."""

    placement: dict[tuple[int, Request], int] = field(default_factory=dict)  # smallest quantity refused
    # (department, class, unit, period if weighed, flavor if flavors' quotas weigh) -> smallest quantity refused
    reclaim: dict[tuple[int, str, Request, float | None, str | None], int] = field(default_factory=dict)
    reclaim_tries: int = 0
    skipped: bool = False  # the last request asked was not tried: the pass's victim searches ran out

    def forget(self) -> None:
        """Something freed within the pass (the fidelity replay's victims without notice leave
        within their reclaim's decision): what failed before may fit now."""
        self.placement.clear()
        self.reclaim.clear()


def per_unit(mode: Mode, job: Job) -> Decimal:
    shape = job.shape
    if mode.whole:
        return Decimal(shape.num_gpu)
    return shape.mig_weight if shape.mig_profile is not None else Decimal(shape.milli) * PER_MILLI


def _place(world: World, job: Job, pool: int, request: Request, memo: PassMemo) -> list[Placement] | None:
    refused = memo.placement.get((pool, request))
    if refused is not None and job.quantity >= refused:
        return None
    units = world.pools.place_all(pool, request, job.quantity)
    if units is None:
        memo.placement[(pool, request)] = min(job.quantity, refused or job.quantity)
    return units


@dataclass(frozen=True)
class Picture:
    """What the victim choice weighs: the replay's flat picture of now (``flat``: with its
    shortcuts) or the request over its period step by step (``periods.Weighed``)."""

    tree: algebra.Tree
    grants: Callable[[], list[algebra.Grant]]
    ask: algebra.Ask
    flat: bool


def picture_of(world: World, ask: algebra.Ask, weighed: Weighed | None) -> Picture:
    if weighed is None:
        return Picture(world.tree, world.grants, ask, True)
    return Picture(weighed.tree, lambda: weighed.grants, weighed.ask, False)


def admit(mode: Mode, world: World, job: Job, memo: PassMemo, reclaim_depth: int) -> Start | Reclaim | None:
    """Start ``job`` now, have grants reclaimed for it, or let it wait (None; ``memo.skipped`` when
    it waits untried, the pass's victim searches spent)."""
    memo.skipped = False
    pool = world.department(job) - 1 if mode.partitioned else 0
    if pool >= len(world.pools.clusters):
        return None  # its department owns no GPUs
    request = unit_request(job.shape, whole=mode.whole)
    unit = per_unit(mode, job)
    ask = world.ask(job, unit * job.quantity) if mode.quotas else None
    weighed = world.weigh(job, ask) if ask is not None else None  # over its period where a window's edge falls within
    quota_ok = ask is None or (weighed.quota_fits() if weighed is not None else world.quota_fits(ask))
    if quota_ok:
        units = _place(world, job, pool, request, memo)
        if units is not None:
            return Start(units, unit, pool)
    if not mode.reclaims or ask is None:
        return None
    flat = weighed is None and not world.stepped_victims
    key = (world.department(job), job.priority_class, request, None if flat else job.requested_s,
           job.flavor if world.flavored else None)
    refused = memo.reclaim.get(key)
    if refused is not None and job.quantity >= refused:
        return None
    if memo.reclaim_tries >= reclaim_depth:
        memo.skipped = True
        return None
    if flat and not world.may_take(ask):
        return None
    picture = picture_of(world, ask, weighed or world.weigh(job, ask, victims=True))
    memo.reclaim_tries += 1
    chosen = _victims(world, picture, pool, request, job.quantity, quota_ok=quota_ok)
    if chosen is None:
        memo.reclaim[key] = min(job.quantity, refused or job.quantity)
        return None
    return Reclaim(chosen, request, unit, pool)


def refusal_reason(mode: Mode, world: World, job: Job) -> str:
    """Why a request that cannot start waits, as admission words its refusal: ``quota`` when the
    quota checks fail over its period and (with reclaims) nothing it may take frees enough quota,
    else ``capacity`` (``allocations.admission.planning._taking``)."""
    if not mode.quotas:
        return "capacity"
    ask = world.ask(job, per_unit(mode, job) * job.quantity)
    weighed = world.weigh(job, ask)
    if weighed.quota_fits() if weighed is not None else world.quota_fits(ask):
        return "capacity"
    if mode.reclaims:
        picture = picture_of(world, ask, weighed or world.weigh(job, ask, victims=True))
        if victims.plan(picture.tree, picture.grants(), picture.ask).admitted:
            return "capacity"
    return "quota"


def _victims(world: World, picture: Picture, pool: int, request: Request, quantity: int, *,
             quota_ok: bool) -> tuple[algebra.Victim, ...] | None:
    """The portal's victim choice for the request, or None if nothing it may take lets it in."""
    if not picture.flat:
        return _plan(world, picture, pool, request, quantity, quota_ok=quota_ok)
    ask = picture.ask
    failed = (ask.department_id, ask.priority, ask.factor, ask.preempts_lower, ask.amounts[None], request, quantity, pool)
    if world.shortcuts and world.failed_plans.get(failed) == world.version:
        return None  # the same plan failed and nothing has changed since (``shortcuts``)
    chosen = _plan(world, picture, pool, request, quantity, quota_ok=quota_ok)
    if chosen is None:
        world.failed_plans[failed] = world.version
    return chosen


def _kept(world: World, picture: Picture) -> victim_view.View | None:
    """The victim choice's view the world keeps, for the flat picture of now (the grants it
    reads); over a period the grants are the stepped picture's: none kept for them."""
    return world.view() if picture.flat else None


def _plan(world: World, picture: Picture, pool: int, request: Request, quantity: int, *,
          quota_ok: bool) -> tuple[algebra.Victim, ...] | None:
    chosen = _grants_plan(world, picture, pool, request, quantity, quota_ok=quota_ok)
    if chosen is None and (quota_ok or victims.plan(picture.tree, picture.grants(), picture.ask,
                                                    view=_kept(world, picture)).admitted):
        chosen = _node_plan(world, picture, pool, request, quantity)  # the GPUs refused: room on one node, as admission
    return chosen


def _node_plan(world: World, picture: Picture, pool: int, request: Request,
               quantity: int) -> tuple[algebra.Victim, ...] | None:
    kept = _kept(world, picture)
    if kept is not None and not victims.within_guarantee(kept, picture.ask):
        return None  # ``node_room_plan``'s own first answer, before the nodes are listed for it
    units_on = {h.gid: [unit.node for unit in h.units] for h in world.holdings.values() if h.pool == pool}
    units_on.update({gid: nodes for gid, (where, nodes) in world.promised_on.items() if where == pool})
    units_on.update({h.gid: [unit.node for unit in h.units] for h in world.scheduled.values() if h.pool == pool})
    view = world.cut_view(pool)
    try:
        plan = node_room_plan(picture.tree, picture.grants(), picture.ask, units_on=units_on,
                              capacity_fits=lambda cut: view.fits(request, quantity, cut), view=kept)
    finally:
        view.restore()
    return plan.victims if plan is not None and plan.victims else None


def _grants_plan(world: World, picture: Picture, pool: int, request: Request, quantity: int, *,
                 quota_ok: bool) -> tuple[algebra.Victim, ...] | None:
    tree, ask, kept = picture.tree, picture.ask, _kept(world, picture)
    if not quota_ok and not victims.plan(tree, picture.grants(), ask, view=kept).admitted:
        return None  # nothing it may take frees enough quota: the GPUs need not be asked

    view = world.cut_view(pool)
    shortcuts = world.shortcuts and picture.flat and quota_ok and quantity == 1
    bound: list[RoomBound] = []  # once the unit does not fit as the pool stands

    def fits(cut: victims.Cut) -> bool:
        if cut and bound:
            if not bound[0].may_fit(cut):
                return False  # no GPU the cut frees takes the unit (``shortcuts.RoomBound``)
            if bound[0].exact:
                return True  # one that does, and the unit asks nothing else (``RoomBound.exact``)
        return view.fits(request, quantity, cut)

    try:
        room = None
        if not fits(frozenset()):
            if world.shortcuts and quantity == 1:
                bound.append(RoomBound(world.pools, pool, request, world.holdings))
            if shortcuts and not world.shares.room_after(pool, request, world.tree, world.held, ask):
                return None  # no room even with every grant that could be a candidate gone (``shortcuts``)
            local = world.on_pool.get(pool, set()) | {h.gid for h in world.scheduled.values() if h.pool == pool}
            room = victims.room_facts(tree, picture.grants(), ask, local=local, view=kept)
        plan = victims.plan(tree, picture.grants(), ask, capacity_fits=fits, capacity_candidates=room, view=kept)
    finally:
        view.restore()
    if not plan.admitted or not plan.victims:
        return None
    return plan.victims

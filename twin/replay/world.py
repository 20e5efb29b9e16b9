"""What a replay holds at one instant, and the portal's pure rules asked about it.

The quota tree is built as ``allocations.admission.planning`` builds it, from memory instead of
the database: an organisation (id 0) whose quota is the installed GPU-equivalents, and under it
the departments (ids 1..n) with their guarantees and limits, each below its ``parent`` (none: the
organisation), all in the GPU-equivalents scope (``None``): the algebra then checks every quota on
a request's chain, a parent's counting what its children hold (or their unlent guarantees). Grants are ``algebra.Grant`` with the units a reclaim already takes as ``leaving``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from decimal import Decimal

from allocations.quotas import algebra, victims
from allocations.quotas.shrinking import shrink_plan
from placement import Node, Placement
from twin.policy import Policy, PriorityClass
from twin.replay.ahead import PictureCut
from twin.replay.cuts import CutView
from twin.replay.periods import Periods, Spanned, Weighed
from twin.replay.shortcuts import HeldShares
from twin.replay.state import Holding, Pools
from twin.workload import Job

ROOT = 0
ZERO = Decimal(0)


def quota_tree(policy: Policy, installed: Decimal) -> algebra.Tree:
    """The quota tree (see the module's docstring); a department's flavors' quotas in their own
    scopes (each flavor by its number, ``Policy.flavor_numbers``), in units of the flavor."""
    parents: dict[int, int | None] = {ROOT: None}
    limits: dict[tuple[int, algebra.Scope], algebra.Limit] = {(ROOT, None): algebra.Limit(ROOT, None, installed, installed)}
    index_of = {d.name: k for k, d in enumerate(policy.departments, start=1)}
    flavors = policy.flavor_numbers
    for index, department in enumerate(policy.departments, start=1):
        parents[index] = index_of[department.parent] if department.parent is not None else ROOT
        limits[(index, None)] = algebra.Limit(index, None, department.guarantee, department.limit)
        for quota in department.flavor_quotas:
            scope = flavors[quota.flavor]
            limits[(index, scope)] = algebra.Limit(index, scope, quota.guarantee, quota.limit)
    return algebra.Tree(parents=parents, limits=limits)


class World:
    """The pools, the grants holding them, and what each department holds."""

    def __init__(self, policy: Policy, pools: Pools, nodes: Sequence[Node]) -> None:
        self.policy, self.pools = policy, pools
        self.installed = sum(len(node.gpus) for node in nodes)
        self.tree = quota_tree(policy, Decimal(self.installed))
        self.index = {d.name: k for k, d in enumerate(policy.departments, start=1)}
        self.nested = any(d.parent is not None for d in policy.departments)  # a parent's quota binds its children
        self.holdings: dict[int, Holding] = {}
        self.on_pool: dict[int, set[int]] = {}  # pool → the grants holding units there
        self.held: dict[tuple[int, algebra.Scope], Decimal] = {(k, None): ZERO for k in self.index.values()}
        self.leaving_held: dict[int, Decimal] = dict.fromkeys(self.index.values(), ZERO)  # of ``held``, units leaving
        self.native = dict.fromkeys(self.index.values(), 0.0)  # GPU-equivalents the requests themselves ask
        self.waiting = dict.fromkeys(self.index.values(), 0.0)  # the same, of the requests waiting
        self.classes_held: dict[tuple[int, int], int] = {}  # (department, priority) → grants not leaving
        self._next = 1
        self._version = 0
        self._grants: tuple[int, list[algebra.Grant]] = (-1, [])
        self._view: tuple[int, victims.View | None] = (-1, None)  # the victim choice's view at a version
        self._of_department: dict[int, dict[int, algebra.Grant]] = {k: {} for k in self.index.values()}
        self._changed: set[int] = set()  # departments whose grants changed since the last view
        self._regroup: set[int] = set()  # departments with a grant made again since (a fair-share factor too)
        self._stale: set[int] = set()  # holdings whose grant must be made again (``grants``)
        self._all_stale = False  # a fair-share factor changed: every grant
        self._fits: tuple[int, dict[tuple[object, ...], bool]] = (-1, {})  # quota checks asked at a version
        self._totals = algebra.TotalsChecks(self.tree, self.held)  # the checks' sums at that version
        self._grant_of: dict[int, algebra.Grant] = {}  # each holding's last grant (``_grant``)
        self.shares = HeldShares(pools)  # what each department's grants hold on each GPU (``shortcuts``)
        self.shortcuts = True  # skip victim plans known to fail (``twin.replay.shortcuts``); off: ask every one
        self.failed_plans: dict[tuple[object, ...], int] = {}  # a failed victim plan → the version it failed at
        self.fair_share: dict[int, float] = {}  # department → its Fair Tree factor (none: 1.0 each)
        # A grant promised where its victims were, not yet started (the fidelity replay's): its
        # grant id → its pool and the node of each unit, which room on one node reads too.
        self.promised_on: dict[int, tuple[int, list[str]]] = {}
        self.periods: Periods | None = None  # with quota windows: a request weighed over its period (``periods``)
        self.class_number = policy.class_numbers
        self.flavor_number = policy.flavor_numbers
        # A flavor's quota: a grant and a request of the flavor count their units in its scope.
        self.flavored = any(department.flavor_quotas for department in policy.departments)
        # A window sets a priority class's share, or a department has a flavor's quota: every
        # request is weighed over its period, where such scopes count the grants of their class
        # or flavor (the flat picture of now counts departments' GPU-equivalents only).
        self.weighs_all = self.flavored or any(rule.priority_class is not None for rule in policy.windows)
        self.now = 0.0  # the replay's instant (set by the replay)
        # The victim choice over each request's period, step by step, even where no window's edge
        # falls within it: the portal's, which may take borrowed grants for a request beyond its
        # guarantee now but within it once some of its department's grants end within the period.
        # The plain replay chooses on its picture of now (off); the fidelity replay sets it.
        self.stepped_victims = False
        self._plain_periods: Periods | None = None
        self._pictures: dict[tuple[int, float, float, float], Weighed] = {}  # (version, now, start, end) -> the grants over it
        # Booking ahead (``twin.replay.ahead``): grants approved ahead of their start, by grant id,
        # holding their units from their period's start only; while a decision is taken on a
        # picture of its own (``picturing``), the start of the period it weighs.
        self.scheduled: dict[int, Holding] = {}
        self.period_start: float | None = None
        self.picturing = False
        self.picture_cut: PictureCut | None = None

    @property
    def version(self) -> int:
        """Counts every change of the grants, the quota tree or the fair-share factors."""
        return self._version

    def department(self, job: Job) -> int:
        return self.index[job.department]

    def priority_class(self, job: Job) -> PriorityClass:
        return self.policy.classes[job.priority_class]

    def in_guarantee(self, job: Job) -> bool:
        """Whether the request keeps its department within its guarantee: its own GPU-equivalents,
        with what the department's requests hold and what those waiting ask (whatever a policy
        books for them), at most the guarantee."""
        department = self.department(job)
        guarantee = float(self.tree.limits[(department, None)].guaranteed)
        return self.native[department] + self.waiting[department] + job.milli / 1000 <= guarantee + 1e-9

    def ask(self, job: Job, amount: Decimal) -> algebra.Ask:
        cls = self.priority_class(job)
        return algebra.Ask(department_id=self.department(job), amounts={None: amount}, priority=cls.value,
                           factor=cls.factor, preempts_lower=cls.preempts_lower)

    def quota_fits(self, ask: algebra.Ask) -> bool:
        """The portal's quota checks of ``ask``; asked again for the same department, amount and
        factor while nothing has changed (``version``), the answer is the one already given."""
        key = (ask.department_id, ask.amounts[None], ask.factor, ask.priority, ask.preempts_lower)
        if not self.shortcuts:
            return all(check.fits for check in algebra.checks_from_totals(self.tree, self.held, ask))
        if self._fits[0] != self._version:
            self._fits = (self._version, {})
            self._totals = algebra.TotalsChecks(self.tree, self.held)  # what each department holds, summed once
        known = self._fits[1].get(key)
        if known is None:
            known = all(check.fits for check in self._totals.checks(ask))
            self._fits[1][key] = known
        return known

    def weigh(self, job: Job, ask: algebra.Ask, *, victims: bool = False) -> Weighed | None:
        """``ask`` over the request's period ``[start, start + requested_s)`` step by step, as the
        portal's admission weighs it, where a window changes a number within it, and always where
        a window sets a class's share or a department has a flavor's quota (``weighs_all``), or,
        with ``victims`` and ``stepped_victims``, for the victim choice's picture, or for a
        decision on a picture of its own (``picturing``: booking ahead, whose scheduled grants
        count over their own periods only) unless ``_bound_fits``; None where the flat picture of
        now (``quota_fits``, ``grants``) decides alike and faster: the grants only end within the
        period, so for the quota checks what holds now binds (a period that lies ahead is weighed
        step by step where a window changes a number from now until its end). ``start``:
        ``period_start`` where set, else now."""
        periods = self.periods
        start = self.now if self.period_start is None else self.period_start
        end = start + job.requested_s
        # a window's edge between now and a period that lies ahead changes the numbers it starts with
        crossing = periods is not None and periods.crosses(min(self.now, start), end)
        if not (crossing or self.weighs_all or (victims and self.stepped_victims)):
            if not self.picturing or self._bound_fits(ask, start, end):
                return None
        if periods is None:  # no windows: the quotas' own numbers, step by step at the grants' ends
            if self._plain_periods is None:
                self._plain_periods = Periods(self.policy, quota_tree(self.policy, Decimal(self.installed)), ())
            periods = self._plain_periods
        key = (self._version, self.now, start, end)
        picture = self._pictures.get(key)
        if picture is None:  # the grants over this period, once per state of the grants (many asks share it)
            spanned = []
            for grant in [*self.grants(), *self.scheduled_grants()]:
                held = self.job_of(grant.allocation_id)
                if self.flavored:
                    grant = dataclasses.replace(grant, amounts=self.in_flavor(grant.amounts, held, grant.units))
                spanned.append(Spanned(grant, *self.span_of(grant.allocation_id), self.class_number[held.priority_class]))
            picture = periods.picture(start, end, spanned)
            self._pictures = {k: v for k, v in self._pictures.items() if k[0] == self._version}
            self._pictures[key] = picture
        if self.flavored:
            ask = dataclasses.replace(ask, amounts=self.in_flavor(ask.amounts, job, job.quantity))
        return periods.asking(picture, ask, start, end, class_id=self.class_number[job.priority_class])

    def _bound_fits(self, ask: algebra.Ask, start: float, end: float) -> bool:
        """Whether ``ask`` fits with what holds now and every scheduled grant meeting ``[start,
        end)`` held at once: no step of the period holds more (a grant holding now only ends, a
        scheduled one holds within its own period), so the checks step by step fit too, as the
        flat ones of now do (a decision on a picture then weighs nothing step by step)."""
        held = dict(self.held)
        for holding in self.scheduled.values():
            if holding.since < end and holding.asked_end > start:
                held[(holding.department, None)] += holding.amount
        return all(check.fits for check in algebra.checks_from_totals(self.tree, held, ask))

    def scheduled_grants(self) -> list[algebra.Grant]:
        """The grants approved ahead, not begun: each may be taken (at once: it runs nowhere yet)."""
        return [algebra.Grant(allocation_id=h.gid, department_id=h.department, amounts={None: h.amount},
                              priority=h.priority, age=h.age or h.gid, takeable=True, units=len(h.units),
                              fair_share=self.fair_share.get(h.department, 1.0))
                for h in self.scheduled.values()]

    def schedule(self, holding: Holding) -> None:
        """A grant approved ahead of its start (``Holding.since``): it holds nothing now."""
        self.scheduled[holding.gid] = holding
        self._version += 1

    def unschedule(self, gid: int) -> Holding:
        """A scheduled grant begins, or a reclaim takes it (at once)."""
        self._version += 1
        return self.scheduled.pop(gid)

    def new_gid(self) -> int:
        gid = self._next
        self._next += 1
        return gid

    def span_of(self, grant_id: int) -> tuple[float, float]:
        """A grant's period: from when it was decided (approved ahead: its start) until its asked end."""
        holding = self.holdings.get(grant_id) or self.scheduled[grant_id]
        return holding.since, holding.asked_end

    def job_of(self, grant_id: int) -> Job:
        """The request a grant holds for."""
        holding = self.holdings.get(grant_id) or self.scheduled[grant_id]
        return holding.job

    def in_flavor(self, amounts: Mapping[algebra.Scope, Decimal], job: Job, units: int) -> dict[algebra.Scope, Decimal]:
        """``amounts`` with ``units`` in the scope of the job's flavor where the policy has flavors'
        quotas (the portal's ``grant_amounts``: every request has a flavor, its units counted in
        the flavor's scope beside its GPU-equivalents)."""
        flavor = self.flavor_number.get(job.flavor or "") if self.flavored else None
        return dict(amounts) if flavor is None else {**amounts, flavor: Decimal(units)}

    # ----------------------------------------------------------------- grants
    def start(self, job: Job, units: list[Placement], *, per_unit: Decimal, pool: int) -> Holding:
        holding = Holding(self._next, job, self.department(job), self.priority_class(job).value, per_unit, units, pool,
                          0.0)
        self._next += 1
        self.holdings[holding.gid] = holding
        self.on_pool.setdefault(pool, set()).add(holding.gid)
        self._grant_of[holding.gid] = self._make_grant(holding)  # its place in the grants' order
        self._of_department[holding.department][holding.gid] = self._grant_of[holding.gid]
        self._stale.add(holding.gid)  # made again when asked: its caller may set its age first
        self._count(holding, len(units), +1)
        self._takeable(holding, +1)
        self.shares.add(holding, units, +1)
        return holding

    def _count(self, holding: Holding, units: int, sign: int) -> None:
        self._version += 1
        self.held[(holding.department, None)] += sign * holding.per_unit * units
        self.native[holding.department] += sign * units * holding.job.shape.milli / 1000

    def _takeable(self, holding: Holding, sign: int) -> None:
        key = (holding.department, holding.priority)
        self.classes_held[key] = self.classes_held.get(key, 0) + sign

    def may_take(self, ask: algebra.Ask) -> bool:
        """Whether the victim choice could find anything for ``ask`` (a cheap necessary condition
        of its facts): a department beyond its limit, a lower priority to preempt in its own
        department, or, for a request within its guarantee, another department beyond its own."""
        if self.nested:
            return True  # the facts below read each department's own holding against its own quota
        limits = self.tree.limits
        if any(held > limits[key].limit for key, held in self.held.items()):
            return True
        department = ask.department_id
        if ask.preempts_lower and any(count > 0 and d == department and priority < ask.priority
                                      for (d, priority), count in self.classes_held.items()):
            return True
        own = limits[(department, None)]
        if self.held[(department, None)] + ask.amounts[None] > own.guaranteed:
            return False
        return any(held > limits[key].guaranteed for key, held in self.held.items() if key[0] != department)

    def give_back(self, holding: Holding, units: int) -> list[Placement]:
        """End the last ``units`` units of a grant (all: the grant ends); returns them. Units on
        their way out left the GPUs when their reclaim was decided (``mark_leaving``): only the
        others are released here."""
        was_leaving = holding.leaving > 0
        gone = holding.units[len(holding.units) - units:]
        released = gone if holding.parked else gone[: len(gone) - min(units, holding.leaving)]
        self.pools.release(holding.pool, released)
        self.shares.add(holding, released, -1)
        del holding.units[len(holding.units) - units:]
        left = min(units, holding.leaving)
        holding.leaving -= left
        self.leaving_held[holding.department] -= holding.per_unit * left
        holding.parked = holding.parked and holding.leaving > 0
        self._count(holding, units, -1)
        self._stale.add(holding.gid)
        if not holding.units:
            del self.holdings[holding.gid]
            self.on_pool[holding.pool].discard(holding.gid)
            self._grant_of.pop(holding.gid, None)
            self._of_department[holding.department].pop(holding.gid, None)
            self._changed.add(holding.department)
            self._regroup.add(holding.department)
            if not was_leaving and not holding.idle_notice:
                self._takeable(holding, -1)
        elif was_leaving and not holding.leaving and not holding.idle_notice:
            self._takeable(holding, +1)
        return gone

    def grants(self) -> list[algebra.Grant]:
        """The grants as the algebra sees them, in the order they started (kept until a grant
        starts, leaves or ends; only those that changed are made again)."""
        if self._grants[0] != self._version:
            self._changed.update(self.holdings[gid].department for gid in self._stale & self.holdings.keys())
            stale = self.holdings.keys() if self._all_stale else self._stale & self.holdings.keys()
            for gid in stale:
                holding = self.holdings[gid]
                self._grant_of[gid] = self._of_department[holding.department][gid] = self._make_grant(holding)
                self._regroup.add(holding.department)
            self._stale, self._all_stale = set(), False
            self._grants = (self._version, list(self._grant_of.values()))
        return self._grants[1]

    def view(self) -> victims.View:
        """The victim choice's view of ``grants`` (what each department holds, its grants ranked),
        made once per version and handed to every plan asked at it, instead of one per plan. It is
        kept (``View.kept``): each department's grants as they start, change and end, what each
        holds (``held``), and what the last view counted of the departments nothing changed in. A
        replay that lists grants of its own besides (``grants`` replaced) gets a view of its list."""
        earlier = self._view[1]
        if self._view[0] == self._version and earlier is not None:
            return earlier
        grants = self.grants()  # made again where they changed: ``_changed``, ``_regroup``
        if "grants" in self.__dict__:
            view = victims.View(self.tree, grants)
        else:
            by_department = {department: list(of.values()) if earlier is None or department in self._regroup
                             else earlier.by_department[department] for department, of in self._of_department.items()}
            view = victims.View.kept(self.tree, dict(self._grant_of), by_department, self.held, earlier=earlier,
                                     changed=self._changed)
            view.know_staying({key: amount - self.leaving_held[key[0]] for key, amount in self.held.items()})
        self._changed, self._regroup = set(), set()
        self._view = (self._version, view)
        return view

    def _make_grant(self, h: Holding) -> algebra.Grant:
        return algebra.Grant(allocation_id=h.gid, department_id=h.department, amounts={None: h.amount},
                             priority=h.priority, age=h.age or h.gid, takeable=not (h.leaving or h.idle_notice), units=len(h.units),
                             leaving=h.leaving, fair_share=self.fair_share.get(h.department, 1.0))

    def set_tree(self, tree: algebra.Tree) -> None:
        """A quota window's edge: the effective numbers from now on."""
        self.tree = tree
        self._version += 1

    def set_fair_share(self, factors: dict[int, float]) -> None:
        if factors != self.fair_share:
            self.fair_share = dict(factors)
            self._all_stale = True
            self._version += 1

    def cut_view(self, pool: int) -> CutView | PictureCut:
        """The victim choice's capacity callback on the pool (on a decision's own picture: the
        picture's, ``twin.replay.ahead``)."""
        return self.picture_cut if self.picture_cut is not None else CutView(self.pools, self.holdings, pool)

    def mark_idle_notice(self, holding: Holding) -> None:
        """An idle policy's reclaim began: the grant keeps its units and its quota until its notice
        ends, but no reclaim may take it any more."""
        if holding.idle_notice:
            return
        if not holding.leaving:
            self._takeable(holding, -1)
        holding.idle_notice = True
        self._stale.add(holding.gid)
        self._version += 1

    def shrink_victims(self, department: int, class_id: int | None = None,
                       flavor: int | None = None) -> tuple[algebra.Victim, ...] | None:
        """What a quota window's lower limit takes back from the department now (shrink policy
        ``reclaim``), in its quota (with ``flavor``, its quota of that flavor; with ``class_id``,
        that class's share of it), as the portal's tick chooses it
        (``allocations.quotas.shrinking``): from the grants holding in the department and below,
        less those being reclaimed (all their units leaving, or an idle policy's notice running);
        a grant giving back some units counts the units it keeps and may not be taken, as a
        reclaim's beneficiary may not. A grant counts its units in its flavor's quota and, where a
        class's share is in force, in its class's share too. None: grants that may not be taken
        stand in the way (the portal's reclaim pending)."""
        tree = self.tree
        subtree = tree.subtree(department)
        grants = []
        for grant in self.grants():
            if grant.department_id not in subtree:
                continue
            holding = self.holdings.get(grant.allocation_id)
            if holding is not None and (holding.idle_notice or holding.leaving >= len(holding.units)):
                continue
            if holding is not None and holding.leaving:
                kept = len(holding.units) - holding.leaving
                grant = dataclasses.replace(grant, amounts={None: holding.per_unit * kept}, units=kept, leaving=0,
                                            takeable=False)
            job = self.job_of(grant.allocation_id)
            if self.flavored:
                grant = dataclasses.replace(grant, amounts=self.in_flavor(grant.amounts, job, grant.units))
            if tree.class_shares:
                grant = dataclasses.replace(grant, amounts=tree.class_amounts(
                    grant.department_id, self.class_number[job.priority_class], grant.amounts))
            grants.append(grant)
        above = set(tree.chain(department)) - {department}
        scope: algebra.Scope = algebra.class_scope(class_id, flavor) if class_id is not None else flavor
        plan = shrink_plan(tree, grants, department_id=department, scope=scope, above=above)
        if plan is None:
            return ()
        return plan.victims if plan.admitted else None

    def mark_leaving(self, victim: algebra.Victim, *, parked: bool = False) -> Holding:
        """The victim's units go to the end of its list (the last ones leave first), marked leaving,
        and leave the GPUs at once: the request they are reclaimed for is booked there now (as the
        portal promises a reclaim's room to its beneficiary), though they run out their notice and
        count for quota and for the metrics until it ends. ``parked``: nobody is booked there (a
        window's shrink takes them back): they stay on their GPUs until they leave."""
        holding = self.holdings[victim.allocation_id]
        end = len(holding.units) - holding.leaving
        moving = holding.units[end - victim.units:end]
        del holding.units[end - victim.units:end]
        holding.units.extend(moving)
        holding.parked = parked
        if not parked:
            self.pools.release(holding.pool, moving)
            self.shares.add(holding, moving, -1)
        if not holding.leaving and not holding.idle_notice:
            self._takeable(holding, -1)
        holding.leaving += victim.units
        self.leaving_held[holding.department] += holding.per_unit * victim.units
        self._stale.add(holding.gid)
        self._version += 1
        return holding

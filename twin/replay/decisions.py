"""Every decision one replay makes, in order: the log the fidelity test compares with the portal's
services (docs/twin.md, "Fidelity").

``DecidingReplay`` is the replay (``engine.Replay``) with its decisions written down as they are
made: each request made (``submit``: a workload line at its ``submit_at``, or the units a reclaim
sent back to the queue, as a new request), each try to start a waiting request (``start`` with
its units, ``reclaim`` with its victims and the units booked where they were, or ``refused`` with
why), each run that ends (``end``) and each reclaimed grant leaving at the end of its notice
(``leave``, then ``begin`` when the request it was taken for starts).

A request (a *piece*: a workload line, or the units of it a reclaim sent back) waits in the
replay's queue; each try is a request made and decided at that instant (the portal's services are
asked so: ``tests/twin/fidelity``), except one booked ahead, made once at its submission and
decided again at each try. Victims of equal priority rank by the order they were made (newest
first), as admission ranks them by allocation id: a request booked ahead at its submission, any
other at the try that admitted it. At one instant: ends, leaves and tries
in the replay's own order (``engine``: ends, then leaves, then arrivals, then one pass of the
queue).

The placement engine is fed the portal's workload (``placement.Workload.from_unit_weights``, as
``allocations.booking.reservations.placement_workload`` counts it): each flavor of the catalogue
once, each unit admitted and not ended (holding, or booked and waiting for its victims), the units
of the request tried (pending), of those booked ahead and still pending until their period ends
(the portal's expire then), and once more the tried request's flavor, with a fresh policy for each try, as each
approval builds one.

Where the plain replay simplifies, this one also takes the portal's rules (each method says which):
a refusal's reason as admission words it (``_why``), a victim without notice gone within the
decision (``_leave_at_once``), a request booked for after its victims' notice counted for quota
from the reclaim on (``_promise_counts``), and the victims' units kept on their GPUs for everyone
else until they leave (``_overlay_rebuild``).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import replace
from decimal import Decimal

from allocations.quotas import algebra
from allocations.quotas.shrinking import shrink_scope
from placement import Node, Placement, Workload, default_policy
from twin.policy import Policy
from twin.replay.engine import EXPIRED, Replay
from twin.replay.engine import LEAVE as LEAVE_EVENT
from twin.replay.log import (
    BEGIN,
    END,
    IDLE_ACT,
    IDLE_END,
    IDLE_WARN,
    LEAVE,
    RANK,
    RECLAIM,
    REFUSED,
    SHRINK,
    START,
    SUBMIT,
    WINDOW,
    Decision,
    Unit,
    fair_share_order,
    idle_merged,
    unit_key,
    units_of,
)
from twin.replay.mig_overlay import GpuKey
from twin.replay.modes import PassMemo, Reclaim, Start, refusal_reason
from twin.replay.overlay import Overlay
from twin.replay.records import Entry, Promise, unpack
from twin.replay.state import Holding
from twin.workload import Job

_GpuKey = GpuKey  # (pool, node, GPU index)


class DecidingReplay(Overlay, Replay):
    """The replay, writing each decision into ``log`` (see the module's docstring)."""

    def __init__(self, jobs: Sequence[Job], nodes: Sequence[Node], policy: Policy, mode: str, *,
                 horizon: float | None = None, drain_s: float = 86400.0) -> None:
        super().__init__(jobs, nodes, policy, mode, horizon=horizon, drain_s=drain_s)
        self.log: list[Decision] = []
        self.pieces: dict[int, int] = {}  # id(job) of a request made -> its number
        self._kept: list[Job] = []  # the requests made, so that their ids stay theirs
        self._made = sorted(range(len(self.jobs)), key=lambda k: (self.jobs[k].submit_at, self.jobs[k].line))
        self._next_made = 0
        self._open: dict[int, Job] = {}  # requests admitted and not ended (holding, or waiting for victims)
        # piece -> its rank among the requests made (the portal's allocation ids): a request
        # booked ahead is made at its submission, any other at the try that admits it
        self._admitted: dict[int, int] = {}
        self._made_count = 0
        self._catalogue = {unit_key(shape): 1.0 for shape in policy.flavors.values()}
        self._in_promise = False
        self._idle_ending = False
        self._idle_log: list[Decision] = []  # the idle ladder's warnings and actions, merged in by ``idle_merged``
        self._promised: dict[int, algebra.Grant] = {}  # piece -> the grant it will be, while its victims leave
        self._want: dict[_GpuKey, int] = {}  # GPU -> thousandths its leaving units hold
        self._have: dict[_GpuKey, Placement] = {}  # GPU -> the overlay booked on it
        self._models: dict[_GpuKey, frozenset[str]] = {}
        self._want_mig: dict[_GpuKey, list[Placement]] = {}  # GPU -> the MIG instances leaving from it
        self._have_mig: dict[_GpuKey, list[Placement]] = {}  # GPU -> those of them booked again on it
        self._mig_gpu_sets: dict[int, set[tuple[str, int]]] = {}
        pools = self.world.pools
        self._pool_release = pools.release
        pools.release = self._release_settling  # type: ignore[method-assign]
        pools.apply = self._apply_making_room  # type: ignore[method-assign]
        self._world_grants = self.world.grants
        self.world.grants = self._grants  # type: ignore[method-assign]
        self.world.may_take = self._may_take  # type: ignore[method-assign]
        self.world.stepped_victims = True  # the victim choice over each request's period, as admission's
        self.crossing: set[tuple[float, int]] = set()  # (at, piece): tries whose period a window's edge cuts
        self._promised_span: dict[int, tuple[float, float]] = {}  # piece -> its period, while its victims leave
        self._world_span_of = self.world.span_of
        self.world.span_of = self._span_of  # type: ignore[method-assign]
        self._world_job_of = self.world.job_of
        self.world.job_of = self._job_of  # type: ignore[method-assign]

    # ---------------------------------------------------------------- requests made
    def _make(self, job: Job) -> int:
        piece = len(self._kept) + 1
        self._kept.append(job)
        self.pieces[id(job)] = piece
        ahead = job.starts_at if self._asks_ahead(job) and job.starts_at is not None and job.starts_at > self.now else None
        self.log.append(Decision(self.now, SUBMIT, piece, job.line, job.quantity, ahead=ahead))
        if ahead is not None:
            self._made_count += 1
            self._admitted[piece] = self._made_count
        return piece

    def _submit_until(self) -> None:
        while self._next_made < len(self._made) and self.jobs[self._made[self._next_made]].submit_at <= self.now:
            self._make(self.jobs[self._made[self._next_made]])
            self._next_made += 1

    def _piece(self, job: Job) -> int:
        return self.pieces[id(job)]

    def _enqueue(self, record: int, job: Job) -> None:
        if id(job) not in self.pieces:  # units a reclaim sent back: a new request
            self._make(job)
        super()._enqueue(record, job)

    # ---------------------------------------------------------------- events
    def _arrive(self, index: int) -> tuple[object, ...] | None:
        self._submit_until()
        return super()._arrive(index)

    def _end(self, gid: int) -> None:
        self._submit_until()
        holding = self.world.holdings.get(gid)
        if holding is not None:
            piece = self._piece(holding.job)
            self.log.append(Decision(self.now, IDLE_END if self._idle_ending else END, piece, holding.job.line))
            self._open.pop(piece, None)
        super()._end(gid)

    def _idle_end(self, gid: int) -> None:
        """An idle policy's reclaim ending the grant once its notice ran out (``idle-end``)."""
        self._submit_until()
        self._idle_ending = True
        try:
            super()._idle_end(gid)
        finally:
            self._idle_ending = False

    def _leave(self, packed: int) -> None:
        self._submit_until()
        promise_id, gid, units = unpack(packed)
        holding = self.world.holdings.get(gid)
        if holding is not None and holding.leaving:
            piece = self._piece(holding.job)
            gone = min(units, holding.leaving)
            self.log.append(Decision(self.now, LEAVE, piece, holding.job.line, gone))
            if gone == len(holding.units):
                self._open.pop(piece, None)
            else:
                self._open[piece] = _with_quantity(holding.job, len(holding.units) - gone)
        self._in_promise = True
        try:
            super()._leave(packed)
        finally:
            self._in_promise = False

    def _window(self, index: int) -> None:
        """A window's edge during the replay (those in force at 0 are the start's numbers): the
        department's quota, its quota of a flavor (``flavor``) or a class's share of either
        (``share``), from now on."""
        step = self.steps[index]
        if step.at > 0:
            self._submit_until()
            name = self.world.policy.departments[step.department - 1].name
            self.log.append(Decision(self.now, WINDOW, 0, 0, quota=(name, step.guaranteed, step.limit),
                                     share=_name(self.world.policy.classes, step.priority_class),
                                     flavor=_name(self.world.policy.flavors, step.flavor)))
        super()._window(index)

    def _shrink(self, department: int, class_id: int | None = None, flavor: int | None = None,
                ) -> tuple[algebra.Victim, ...]:
        """What a window's lower limit takes back (``window``'s victims: the portal's edge reclaims
        them); met later, where grants in the way could not be taken at the edge, a ``shrink``
        line of its own. Victims without notice leave within the tick, as the portal reclaims
        them at once."""
        retry = (department, class_id, flavor) in self.shrinks_pending
        chosen = super()._shrink(department, class_id, flavor)
        if not chosen:
            return chosen
        victims = tuple((self._piece(self.world.holdings[v.allocation_id].job), v.units) for v in chosen)
        if retry:
            tree = self.world.tree
            scope = shrink_scope(tree, department_id=department,
                                 scope=algebra.class_scope(class_id, flavor) if class_id is not None else flavor)
            limit = tree.limits[(department, scope)]
            name = self.world.policy.departments[department - 1].name
            self.log.append(Decision(self.now, SHRINK, 0, 0, victims=victims, quota=(name, limit.guaranteed, limit.limit),
                                     share=_name(self.world.policy.classes, class_id),
                                     flavor=_name(self.world.policy.flavors, flavor)))
        else:
            self.log[-1] = replace(self.log[-1], victims=victims)
        self._leave_at_once(max(self.promises))
        return chosen

    def _pass(self, only: set[tuple[object, ...] | None] | None) -> None:
        self._submit_until()
        self._log_rank(only)
        super()._pass(only)

    def _log_rank(self, only: set[tuple[object, ...] | None] | None) -> None:
        """With fair share, a pass whose waiting requests of one priority come from two departments
        or more tries them in the order of the departments' factors: that order is a decision."""
        if self.fair is None:
            return
        heads = [entries[0] for key, entries in self.buckets.items() if entries and (only is None or key in only)]
        departments: dict[float, set[str]] = {}
        for entry in heads:
            departments.setdefault(entry.key[0], set()).add(entry.job.department)
        if all(len(names) < 2 for names in departments.values()):
            return
        self.log.append(Decision(self.now, RANK, 0, 0, order=fair_share_order(self.world.fair_share, self.world.index)))

    # ---------------------------------------------------------------- decisions
    def _try(self, entry: Entry, memo: PassMemo) -> bool:
        self._feed_workload(entry.job)
        self._overlay_rebuild()
        job, piece = entry.job, self._piece(entry.job)
        begin = self._period_start(job)
        outcome = self._decide(entry, memo)
        if outcome is EXPIRED:
            return True
        periods = self.world.periods
        start = self.now if begin is None else begin
        if periods is not None and periods.crosses(start, start + job.requested_s):
            self.crossing.add((self.now, piece))
        if outcome is None:
            if not memo.skipped:  # one the pass had no victim search left for was not tried: nothing decided
                self.log.append(Decision(self.now, REFUSED, piece, job.line, reason=self._why(job, begin), ahead=begin))
            return False
        self._open[piece] = job
        if piece not in self._admitted:
            self._made_count += 1
            self._admitted[piece] = self._made_count
        if isinstance(outcome, Start):
            self.log.append(Decision(self.now, START, piece, job.line, units=units_of(outcome.units, job.shape),
                                     ahead=begin))
            self._started(entry, outcome)
        else:
            assert isinstance(outcome, Reclaim)
            self._reclaim(entry, outcome)
        return True

    def _reclaim(self, entry: Entry, reclaim: Reclaim) -> None:
        world = self.world
        victims = tuple((self._piece(world.job_of(v.allocation_id)), v.units) for v in reclaim.victims)
        begin = self._period_start(entry.job)
        newest = max(self.promises, default=0)
        super()._reclaim(entry, reclaim)
        self.log.append(Decision(self.now, RECLAIM, self._piece(entry.job), entry.job.line,
                                 units=units_of(self.booked, entry.job.shape), victims=victims, ahead=begin))
        made = max(self.promises, default=0)
        if made <= newest:
            return  # no victim runs out a notice: every one was approved ahead and is gone already
        promise = self.promises[made]
        if promise.entry is entry and promise.start is not None:
            self._promise_counts(entry, reclaim.per_unit, +1)
            self.world.promised_on[-self._piece(entry.job)] = (promise.start.pool, [u.node for u in promise.start.units])
        self._leave_at_once(made)

    def _take_scheduled(self, victim: algebra.Victim) -> None:
        """A grant approved ahead taken at once: the units it keeps stay admitted."""
        holding = self.world.scheduled[victim.allocation_id]
        piece = self._piece(holding.job)
        if victim.units >= len(holding.units):
            self._open.pop(piece, None)
        else:
            self._open[piece] = _with_quantity(holding.job, len(holding.units) - victim.units)
        super()._take_scheduled(victim)

    def _schedule(self, entry: Entry, start: Start, begin: float) -> None:
        super()._schedule(entry, start, begin)
        self.world.scheduled[max(self.world.scheduled)].age = self._admitted[self._piece(entry.job)]

    def _begin(self, gid: int) -> None:
        """A grant approved ahead begins (``begin``)."""
        self._submit_until()
        self._in_promise = True
        try:
            super()._begin(gid)
        finally:
            self._in_promise = False

    def _leave_at_once(self, promise_id: int) -> None:
        """A victim without notice leaves within the decision, as the portal's approval reclaims
        it at once, before anything else is tried: the rest of the pass may use what it frees."""
        now = [event for event in self.events
               if event[0] == self.now and event[1] == LEAVE_EVENT and unpack(event[3])[0] == promise_id]
        if not now:
            return
        self.memo.forget()
        self.events = [event for event in self.events if event not in now]
        heapq.heapify(self.events)
        for event in sorted(now):
            self._leave(event[3])

    def _promise_counts(self, entry: Entry, unit: Decimal, sign: int) -> None:
        """A request booked where its victims were counts for quota from the reclaim on, as the
        portal's scheduled grant does (next to the victims, until their notice ends), and is never
        taken itself (``planning.reclaim_beneficiaries``); room on one node finds its units on
        their nodes (``World.promised_on``), so a node it is booked on is not emptied for another."""
        job, world = entry.job, self.world
        piece = self._piece(job)
        amount = unit * job.quantity
        world.held[(world.department(job), None)] += sign * amount
        world._version += 1
        if sign > 0:
            self._promised[piece] = algebra.Grant(
                allocation_id=-piece, department_id=world.department(job), amounts={None: amount},
                priority=world.priority_class(job).value, age=self._admitted[piece], takeable=False, units=job.quantity)
            self._promised_span[piece] = (self.now, self.now + job.requested_s)
        else:
            del self._promised[piece], self._promised_span[piece]
            world.promised_on.pop(-piece, None)

    def _span_of(self, grant_id: int) -> tuple[float, float]:
        """A grant's period; a promised request's (numbered ``-piece``) from its reclaim on."""
        return self._promised_span[-grant_id] if grant_id < 0 else self._world_span_of(grant_id)

    def _job_of(self, grant_id: int) -> Job:
        """The request a grant holds for; a promised request's (numbered ``-piece``) itself."""
        return self._kept[-grant_id - 1] if grant_id < 0 else self._world_job_of(grant_id)

    def _may_take(self, ask: algebra.Ask) -> bool:
        """The replay's cheap test before asking the victim choice, without its shortcut for a
        request beyond its department's guarantee: the victim choice may still take borrowed
        grants for it (it counts what the department holds its own way). The plain replay keeps
        the shortcut: without it a month's full policy replays two to three times slower for
        about the same reclaims."""
        world = self.world
        limits = world.tree.limits
        if any(held > limits[key].limit for key, held in world.held.items()):
            return True
        department = ask.department_id
        if ask.preempts_lower and any(count > 0 and d == department and priority < ask.priority
                                      for (d, priority), count in world.classes_held.items()):
            return True
        return any(held > limits[key].guaranteed for key, held in world.held.items() if key[0] != department)

    def _grants(self) -> list[algebra.Grant]:
        return [*self._world_grants(), *self._promised.values()]

    def _start(self, entry: Entry, start: Start, *, since: float | None = None) -> None:
        if self._piece(entry.job) in self._promised:
            self._promise_counts(entry, start.per_unit, -1)
        super()._start(entry, start, since=since)
        holding: Holding = self.world.holdings[max(self.world.holdings)]
        holding.age = self._admitted[self._piece(entry.job)]  # victims rank by admission, as ids do
        if self._in_promise:
            self.log.append(Decision(self.now, BEGIN, self._piece(entry.job), entry.job.line))
        self._idle_note(entry.job, min(self.now + entry.job.runtime_s, holding.asked_end))

    def _promise_since(self, promise: Promise) -> float | None:
        """A reclaim's beneficiary's period began when the reclaim was decided (the portal's
        scheduled grant keeps the interval it was asked for; booked ahead, from its start, already
        past): a run that its victims' notice pushed past its period's end ends there, as the
        portal's grant expires."""
        begin = self._period_start(promise.entry.job) if promise.entry is not None else None
        return promise.decided if begin is None else begin

    def _idle_note(self, job: Job, ends: float) -> None:
        """The ladder's moves on a grant that starts now, as the replay reckons them at its start
        (``rules.IdleWatch.times``): a warning at one tick, and, for ``reclaim``, the action at a
        later one; logged in time order by ``idle_merged`` where the grant still holds then."""
        times = self.idle.times(job, self.now, ends) if self.idle is not None else None
        if times is None:
            return
        piece = self._piece(job)
        self._idle_log.append(Decision(times.warned_at, IDLE_WARN, piece, job.line, reason=times.rule.name))
        if times.acts_at is not None:
            self._idle_log.append(Decision(times.acts_at, IDLE_ACT, piece, job.line, reason=times.rule.name))

    def _why(self, job: Job, begin: float | None = None) -> str:
        """Why a request that cannot start now waits (``modes.refusal_reason``), over its period
        (from ``begin``, booked ahead; on its own picture where its decision was)."""
        world = self.world
        world.period_start, world.picturing = begin, self._picture is not None
        try:
            return refusal_reason(self.mode, world, job)
        finally:
            world.period_start, world.picturing = None, False

    def _feed_workload(self, job: Job) -> None:
        """A fresh placement policy on the portal's workload for this try (see the docstring)."""
        weights = dict(self._catalogue)
        pending = [waiting for waiting in self._ahead.values()  # booked ahead, made, not yet admitted
                   if waiting is not job and waiting.starts_at is not None
                   and waiting.starts_at + waiting.requested_s > self.now]
        for open_job in [*self._open.values(), *pending]:
            key = unit_key(open_job.shape)
            weights[key] = weights.get(key, 0.0) + open_job.quantity
        key = unit_key(job.shape)
        weights[key] = weights.get(key, 0.0) + job.quantity + 1.0
        workload = Workload.from_unit_weights(weights)
        pools = self.world.pools
        for index, cluster in enumerate(pools.clusters):
            cluster.cache.pop(("deltas", id(pools.policies[index])), None)
            pools.policies[index] = default_policy(workload)


def _name(named: Mapping[str, object], number: int | None) -> str | None:
    """The name of a class or a flavor of the policy by its number (from 1, in the policy's order)."""
    return None if number is None else list(named)[number - 1]


def _with_quantity(job: Job, quantity: int) -> Job:
    return replace(job, quantity=quantity)


def replay_decisions(jobs: Sequence[Job], nodes: Sequence[Node], policy: Policy, mode: str = "full", *,
                     drain_s: float = 86400.0) -> tuple[list[Decision], DecidingReplay]:
    """Replay ``jobs`` and return every decision in order (and the replay, for its outcome)."""
    replay = DecidingReplay(jobs, nodes, policy, mode, drain_s=drain_s)
    replay.run()
    return idle_merged(replay.log, replay._idle_log), replay


__all__ = ["BEGIN", "END", "IDLE_ACT", "IDLE_END", "IDLE_WARN", "LEAVE", "RANK", "RECLAIM", "REFUSED", "SHRINK", "START",
           "SUBMIT", "WINDOW", "Decision", "DecidingReplay", "Unit", "fair_share_order", "idle_merged", "replay_decisions"]

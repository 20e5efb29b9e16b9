"""The replay in virtual time: arrivals, ends and reclaim notices on one event queue.

A request arrives at its ``eligible_at`` and waits in the queue until its policy starts it
(``modes.admit``). Its run ends ``runtime_s`` later, releasing its units. Waiting requests are
tried again whenever GPUs or quota free (an end, a reclaim's notice running out), in order:
priority first (except for ``pool``), then submission, and a request that cannot start does not
hold back those behind it (backfill). Identical requests (department, class, shape, quantity)
wait in one FIFO bucket: once its head cannot start in a pass, neither can the rest, so a pass
costs the number of buckets, not the length of the queue.

Each grant's period is ``requested_s`` from its start (its run ends within it); with quota windows,
a request whose period a window's edge cuts is weighed over it step by step (``periods``).

A reclaim marks its victims' units as leaving; at the end of each victim's notice (its priority
class's) those units are released, their run is lost (the request is queued again to run from the
start), and once every victim of a reclaim has left, the request it was made for is tried first.
A quota window of shrink policy ``reclaim`` takes back, at an edge that lowers a limit, what the
department holds beyond it the same way, for nobody (``Replay._shrink``).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from allocations.fair_share.queue import factor_of, queue_key
from allocations.quotas import algebra
from placement import Node, Placement
from twin.policy import Policy
from twin.replay.ahead import Cut, meets
from twin.replay.modes import MODES, PassMemo, Reclaim, Start, admit
from twin.replay.periods import Periods
from twin.replay.picturing import admit_on_picture, period_pictures
from twin.replay.records import Entry, JobRecord, Outcome, Promise, Run, bucket_key, pack, unpack
from twin.replay.rules import FairShareClock, IdleWatch, window_steps
from twin.replay.state import Holding, Pools, partition, workload_of
from twin.replay.world import World
from twin.workload import Job

END, LEAVE, IDLE, WINDOW, NOTICE, ARRIVE, BEGIN = 0, 1, 2, 3, 4, 5, 6  # at one instant: what frees first, quota edges,
# then arrivals, then grants approved ahead beginning


EXPIRED = object()  # a request's period ended while it waited (``Replay._decide``)


class Replay:
    def __init__(self, jobs: Sequence[Job], nodes: Sequence[Node], policy: Policy, mode: str, *,
                 horizon: float | None = None, drain_s: float = 86400.0) -> None:
        self.mode = MODES[mode]
        # Booking ahead (the portal's policies): a request that asks a later start is decided at
        # its submission over its own period (``twin.replay.ahead``); the baselines know no
        # booking ahead: such a request arrives at its start.
        self.books_ahead = self.mode.quotas
        self.nodes = list(nodes)
        self._ahead: dict[int, Job] = {}  # id -> a request waiting to be decided over its own later period
        self._scheduled: dict[int, tuple[Entry, Start]] = {}  # a grant approved ahead -> its request, units
        self._picture: Callable[[Cut], Pools] | None = None  # the last decision's picture (``_on_picture``)
        self.booked: list[Placement] = []  # the units the last reclaim booked for its request
        policy.check_jobs(list(jobs))
        workload = workload_of(jobs, whole=self.mode.whole)
        groups = partition(nodes, [float(d.guarantee) for d in policy.departments]) if self.mode.partitioned else [
            list(nodes)]
        if not all(groups):
            empty = policy.departments[[bool(g) for g in groups].index(False)].name
            raise ValueError(f"static partitioning gives department {empty!r} no node: raise its guarantee")
        self.world = World(policy, Pools.build(groups, workload), nodes)
        self.jobs = list(jobs)
        self.horizon = horizon if horizon is not None else max((j.eligible_at for j in jobs), default=0.0)
        self.stop = self.horizon + drain_s
        self.records = [JobRecord(job, self.world.department(job)) for job in self.jobs]
        self.runs: list[Run] = []
        self.events: list[tuple[float, int, int, int]] = []  # (time, kind, seq, payload)
        self.buckets: dict[tuple[object, ...], list[Entry]] = {}
        self.memo = PassMemo()  # the pass under way's (``_pass``)
        self.promises: dict[int, Promise] = {}
        self.reclaims = 0
        self._seq = 0
        self.now = 0.0
        self.reclaim_depth = 16
        # the portal's rules over time (``twin.replay.rules``): windows where quotas are checked,
        # idle policies and fair share in the full policy
        self.steps = window_steps(policy, self.stop) if self.mode.quotas and policy.windows else []
        if self.steps:  # a request is weighed over its period where a window's edge falls within it
            self.world.periods = Periods(policy, self.world.tree, (step.at for step in self.steps))
        self.idle = IdleWatch(policy) if self.mode.reclaims and policy.idle_policies else None
        half_life = policy.fair_share_half_life_s if self.mode.reclaims else None
        self.fair = FairShareClock(policy, half_life) if half_life else None
        self.idle_warnings = self.idle_reclaims = 0
        self.shrink_reclaims = 0
        # (department, class, flavor) a shrink could not take back from yet
        self.shrinks_pending: set[tuple[int, int | None, int | None]] = set()

    def _push(self, time: float, kind: int, payload: int) -> None:
        self._seq += 1
        heapq.heappush(self.events, (time, kind, self._seq, payload))

    def _key(self, job: Job) -> tuple[float, ...]:
        priority = -self.world.priority_class(job).value if self.mode.by_priority else 0
        return (priority, job.eligible_at, job.line)

    def _asks_ahead(self, job: Job) -> bool:
        return self.books_ahead and job.starts_at is not None and job.starts_at > job.submit_at

    def _enqueue(self, record: int, job: Job) -> None:
        if self._asks_ahead(job) and job.starts_at is not None and job.starts_at > self.now:
            self._ahead[id(job)] = job  # decided over its own period, from its start
        self.world.waiting[self.world.department(job)] += job.milli / 1000
        heapq.heappush(self.buckets.setdefault(self._bucket_of(job), []), Entry(self._key(job), record, job))

    def run(self) -> Outcome:
        for index, job in enumerate(self.jobs):
            self._push(job.submit_at if self._asks_ahead(job) else job.eligible_at, ARRIVE, index)
        for index, step in enumerate(self.steps):
            self._window(index) if step.at <= 0 else self._push(step.at, WINDOW, index)
        count, began = 0, time.perf_counter()
        while self.events and self.events[0][0] <= self.stop:
            self.now = self.world.now = self.events[0][0]
            if self.fair is not None:
                self.fair.advance(self.now, {d: float(held) for (d, _), held in self.world.held.items()})
                self.world.set_fair_share(self.fair.factors())
            freed, fresh = False, set()
            while self.events and self.events[0][0] == self.now:
                _, kind, _, payload = heapq.heappop(self.events)
                count += 1
                if kind == ARRIVE:
                    fresh.add(self._arrive(payload))
                elif kind == NOTICE:
                    self._idle_notice(payload)
                elif kind == BEGIN:
                    self._begin(payload)
                else:
                    freed = True
                    (self._end, self._leave, self._idle_end, self._window)[kind](payload)
            if self.shrinks_pending:
                self._shrinks_retry()
            self._pass(None if freed else fresh)
        self._close()
        wall = time.perf_counter() - began
        world = self.world
        return Outcome(self.mode.name, self.records, self.runs, self.horizon, self.stop, world.installed,
                       self.reclaims, count, departments=tuple(d.name for d in world.policy.departments),
                       guarantees=tuple(float(d.guarantee) for d in world.policy.departments),
                       notice_s=world.policy.reclaim_notice_s, wall_s=wall, idle_warnings=self.idle_warnings,
                       idle_reclaims=self.idle_reclaims, window_edges=sum(1 for step in self.steps if step.at > 0),
                       shrink_reclaims=self.shrink_reclaims)

    def _arrive(self, index: int) -> tuple[object, ...] | None:
        record = self.records[index]
        record.in_guarantee = self.world.in_guarantee(record.job)
        bucket = self._bucket_of(record.job)
        was_empty = not self.buckets.get(bucket)
        self._enqueue(index, record.job)
        return bucket if was_empty else None

    def _pass(self, only: set[tuple[object, ...] | None] | None) -> None:
        heads = [(self._order(entries[0]), key) for key, entries in self.buckets.items()
                 if entries and (only is None or key in only)]
        heapq.heapify(heads)
        memo = self.memo = PassMemo()
        while heads:
            _, key = heapq.heappop(heads)
            entries = self.buckets[key]
            if not self._try(entries[0], memo):
                continue
            heapq.heappop(entries)
            if entries:
                heapq.heappush(heads, (self._order(entries[0]), key))

    def _bucket_of(self, job: Job) -> tuple[object, ...]:
        """The FIFO bucket a request waits in; weighed over their periods (with windows), requests
        that ask different periods are not identical, nor (with flavors' quotas) two flavors, nor
        two booked ahead for different starts."""
        return bucket_key(job, period=self.world.periods is not None, flavor=self.world.flavored,
                          ahead=self._asks_ahead(job))

    def _order(self, entry: Entry) -> tuple[float, ...]:
        """A bucket head's place in a pass: priority, then (with fair share) its department's
        factor, the least served first, then submission."""
        if self.fair is None:
            return entry.key
        priority, submitted, line = entry.key
        factor = factor_of(self.world.fair_share, self.world.department(entry.job))
        return queue_key(priority=-int(priority), factor=factor, submitted=submitted, tiebreak=int(line))

    def _try(self, entry: Entry, memo: PassMemo) -> bool:
        decided = self._decide(entry, memo)
        if decided is None:
            return False
        if decided is EXPIRED:
            return True
        if isinstance(decided, Start):
            self._started(entry, decided)
        else:
            assert isinstance(decided, Reclaim)
            self._reclaim(entry, decided)
        return True

    def _period_start(self, job: Job) -> float | None:
        """When the request's period begins where it asked a later start and is decided over its
        own period (``_ahead``); None: now."""
        return job.starts_at if id(job) in self._ahead else None

    def _decide(self, entry: Entry, memo: PassMemo) -> Start | Reclaim | None | object:
        """The request's decision (``modes.admit``) over its period, on a picture of its own where
        it lies ahead or meets a grant approved ahead (``_on_picture``); ``EXPIRED``: its period
        ended while it waited (the portal's pending request expires), it is not tried again."""
        job, world = entry.job, self.world
        start = self._period_start(job)
        if start is not None and start + job.requested_s <= self.now:
            world.waiting[world.department(job)] -= job.milli / 1000
            del self._ahead[id(job)]
            return EXPIRED
        self._picture = None
        world.period_start = start
        try:
            begin = self.now if start is None else start
            interval = (begin, begin + job.requested_s)
            if begin > self.now or any(meets((h.since, h.asked_end), interval) for h in world.scheduled.values()):
                return self._on_picture(job, memo, interval)
            return admit(self.mode, world, job, memo, self.reclaim_depth)
        finally:
            world.period_start = None

    def _on_picture(self, job: Job, memo: PassMemo, interval: tuple[float, float]) -> Start | Reclaim | None:
        """The decision on the picture of the request's period (``picturing.admit_on_picture``),
        kept (``_picture``) for the units a reclaim books."""
        self._picture = period_pictures(self.world, list(self.promises.values()), self.nodes, interval)
        return admit_on_picture(self.mode, self.world, job, memo, self.reclaim_depth, self._picture)

    def _started(self, entry: Entry, start: Start) -> None:
        """A request admitted without victims starts now (decided on a picture: booked on the pools
        of now then), or, decided ahead, is scheduled to begin at its start."""
        begin = self._period_start(entry.job)
        if begin is not None and begin > self.now:
            self._schedule(entry, start, begin)
            return
        self._ahead.pop(id(entry.job), None)
        if self._picture is not None:
            self.world.pools.apply(start.pool, start.units)
        self._start(entry, start, since=begin)

    def _schedule(self, entry: Entry, start: Start, begin: float) -> None:
        """A grant approved ahead: it holds its units and counts for quota over its period only."""
        job, world = entry.job, self.world
        world.waiting[world.department(job)] -= job.milli / 1000
        del self._ahead[id(job)]
        holding = Holding(world.new_gid(), job, world.department(job), world.priority_class(job).value, start.per_unit,
                          list(start.units), start.pool, begin, record=entry.record, since=job.starts_at or begin)
        holding.asked_end = holding.since + job.requested_s
        world.schedule(holding)
        self._scheduled[holding.gid] = (entry, start)
        self._push(begin, BEGIN, holding.gid)

    def _begin(self, gid: int) -> None:
        """A grant approved ahead begins: its units are booked on the pools of now."""
        if gid not in self.world.scheduled:
            return  # a reclaim took it before it began
        holding = self.world.unschedule(gid)
        entry, start = self._scheduled.pop(gid)
        self.world.pools.apply(start.pool, holding.units)
        self.world.waiting[self.world.department(entry.job)] += entry.job.milli / 1000  # ``_start`` counts it off
        self._start(entry, Start(holding.units, start.per_unit, start.pool), since=holding.since)

    def _start(self, entry: Entry, start: Start, *, since: float | None = None) -> None:
        """Start the request's run now; its period began at ``since`` (default: now) and ends
        ``requested_s`` later, where its run ends at the latest (the portal's grant expires)."""
        self.world.waiting[self.world.department(entry.job)] -= entry.job.milli / 1000
        holding = self.world.start(entry.job, start.units, per_unit=start.per_unit, pool=start.pool)
        holding.start, holding.record = self.now, entry.record
        holding.since = self.now if since is None else since
        holding.asked_end = holding.since + entry.job.requested_s
        record = self.records[entry.record]
        if record.first_start is None:
            record.first_start = self.now
        ends = min(self.now + entry.job.runtime_s, holding.asked_end)
        self._push(ends, END, holding.gid)
        idle = self.idle.times(entry.job, self.now, ends) if self.idle is not None else None
        if idle is not None:
            self.idle_warnings += 1
            if idle.acts_at is not None:
                self._push(idle.acts_at, NOTICE, holding.gid)
                self._push(idle.acts_at + self.world.priority_class(entry.job).notice_s, IDLE, holding.gid)

    def _idle_notice(self, gid: int) -> None:
        """An idle policy reclaims the grant: from now until its notice ends no reclaim may take it
        (the portal's grant is already being reclaimed: ``algebra.Grant.takeable``). It frees
        nothing, so the waiting requests are not tried again for it."""
        holding = self.world.holdings.get(gid)
        if holding is not None:
            self.world.mark_idle_notice(holding)

    def _idle_end(self, gid: int) -> None:
        """An idle policy's reclaim: the grant's notice has run out; it ends (its request is done,
        not queued again). One a reclaim already takes runs out that reclaim instead."""
        holding = self.world.holdings.get(gid)
        if holding is None or holding.leaving:
            return
        self.idle_reclaims += 1
        self._end(gid)

    def _window(self, index: int) -> None:
        periods = self.world.periods
        assert periods is not None  # there are windows
        step = self.steps[index]
        self.world.set_tree(periods.tree_at(step.at))
        if step.reclaims:
            self._shrink(step.department, step.priority_class, step.flavor)

    def _shrink(self, department: int, class_id: int | None = None, flavor: int | None = None,
                ) -> tuple[algebra.Victim, ...]:
        """A window of shrink policy ``reclaim`` lowered the department's limit: what it holds beyond
        the new limit is taken back (``World.shrink_victims``), each victim with its class's notice,
        its units on their GPUs until they leave and its run lost (its request queued again, as a
        reclaim's victims are). Where grants that may not be taken stand in the way, the shrink
        waits, tried again at each later instant of the replay (the portal's tick retries every 30
        seconds), against the numbers in force then. ``flavor``: the window lowered the department's
        quota of that flavor; ``class_id``: that class's share of the quota (``World.shrink_victims``)."""
        chosen = self.world.shrink_victims(department, class_id, flavor)
        if chosen is None:
            self.shrinks_pending.add((department, class_id, flavor))
            return ()
        self.shrinks_pending.discard((department, class_id, flavor))
        if not chosen:
            return ()
        self.shrink_reclaims += len(chosen)
        self._take(None, [(self.world.mark_leaving(victim, parked=True), victim.units) for victim in chosen], None)
        return chosen

    def _shrinks_retry(self) -> None:
        for department, class_id, flavor in sorted(self.shrinks_pending, key=lambda key: (key[0], key[2] or 0, key[1] or 0)):
            self._shrink(department, class_id, flavor)

    def _reclaim(self, entry: Entry, reclaim: Reclaim) -> None:
        """Mark the victims' units leaving (they leave the GPUs now), book the request there, and
        start it once the last victim's notice ends. Decided on a picture (``_on_picture``), the
        request is booked on the picture without its victims; a victim approved ahead is taken at
        once (it runs nowhere yet). Decided ahead, the running victims' units stay on their GPUs
        until they leave and the request begins at its start or, if later, once they have left."""
        self.reclaims += 1
        world, job = self.world, entry.job
        begin = self._period_start(job)
        ahead = begin is not None and begin > self.now
        units: list[Placement] | None = None
        if self._picture is not None:
            cut = frozenset((victim.allocation_id, victim.units) for victim in reclaim.victims)
            units = self._picture(cut).place_all(0, reclaim.request, job.quantity)
        running = [victim for victim in reclaim.victims if victim.allocation_id not in world.scheduled]
        for victim in reclaim.victims:
            if victim.allocation_id in world.scheduled:
                self._take_scheduled(victim)
        leaving = [(world.mark_leaving(victim, parked=ahead), victim.units) for victim in running]
        if self._picture is None:
            units = world.pools.place_all(reclaim.pool, reclaim.request, job.quantity)
        self.booked = units or []
        start = Start(units, reclaim.per_unit, reclaim.pool) if units is not None else None
        if ahead and start is not None:
            assert begin is not None
            deadline = max((self.now + world.priority_class(h.job).notice_s for h, _ in leaving), default=begin)
            if leaving:
                self._take(None, leaving, None)  # they run out their notice for nobody booked now
            self._schedule(entry, start, max(begin, deadline))
        elif not leaving and start is not None:  # its victims, approved ahead, are gone already
            self._started(entry, start)
        else:
            if self._picture is not None and start is not None:
                world.pools.apply(start.pool, start.units)
            self._take(entry, leaving, start)

    def _take_scheduled(self, victim: algebra.Victim) -> None:
        """A reclaim takes units of a grant approved ahead, at once: its request is made again for
        them (decided ahead again while its start lies ahead)."""
        holding = self.world.scheduled[victim.allocation_id]
        taken = holding.units[len(holding.units) - victim.units:]
        if victim.units >= len(holding.units):
            self.world.unschedule(holding.gid)
            del self._scheduled[holding.gid]
        else:
            del holding.units[len(holding.units) - victim.units:]
            self.world._version += 1
        self._enqueue(holding.record, replace(holding.job, quantity=len(taken)))

    def _take(self, entry: Entry | None, leaving: list[tuple[Holding, int]], start: Start | None) -> None:
        """The victims run out their notice (each its class's) for ``entry`` (None: for nobody)."""
        promise_id = self._seq + 1
        self.promises[promise_id] = Promise(entry, len(leaving), start, self.now)
        for holding, count in leaving:
            notice = self.world.priority_class(holding.job).notice_s
            self._seq += 1
            heapq.heappush(self.events, (self.now + notice, LEAVE, self._seq, pack(promise_id, holding.gid, count)))

    def _promise_since(self, promise: Promise) -> float | None:
        """When a reclaim's beneficiary's period begins: at its start (None) in the plain replay,
        so that its run never outlasts its period."""
        return None

    def _end(self, gid: int) -> None:
        holding = self.world.holdings.get(gid)
        if holding is None:
            return  # reclaimed whole before its run ended
        self._record_run(holding, len(holding.units), lost=False)
        self.records[holding.record].finish = self.now
        self.world.give_back(holding, len(holding.units))

    def _leave(self, packed: int) -> None:
        promise_id, gid, units = unpack(packed)
        holding = self.world.holdings.get(gid)
        if holding is not None and holding.leaving:
            units = min(units, holding.leaving)
            self._record_run(holding, units, lost=True)
            self.world.give_back(holding, units)
            record = self.records[holding.record]
            record.restarts += 1
            self._enqueue(holding.record, replace(holding.job, quantity=units))
        promise = self.promises[promise_id]
        promise.left -= 1
        if promise.left == 0:
            del self.promises[promise_id]
            if promise.entry is None:
                return  # a shrink's: nobody waits for the room
            if promise.start is not None:
                self._start(promise.entry, promise.start, since=self._promise_since(promise))
            else:  # the victims' room did not take it after all (not expected): it waits again
                heapq.heappush(self.buckets.setdefault(self._bucket_of(promise.entry.job), []), promise.entry)

    def _record_run(self, holding: Holding, units: int, *, lost: bool) -> None:
        job = holding.job
        self.runs.append(Run(holding.record, holding.department, holding.start, self.now,
                             float(holding.per_unit) * units, units * job.shape.milli / 1000, job.busy, lost))

    def _close(self) -> None:
        """What still holds at the end holds until then (not lost)."""
        self.now = self.stop
        for holding in list(self.world.holdings.values()):
            self._record_run(holding, len(holding.units), lost=False)


def replay(jobs: Sequence[Job], nodes: Sequence[Node], policy: Policy, mode: str, *, horizon: float | None = None,
           drain_s: float = 86400.0) -> Outcome:
    return Replay(jobs, nodes, policy, mode, horizon=horizon, drain_s=drain_s).run()


__all__ = ["JobRecord", "Outcome", "Replay", "Run", "replay"]

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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from allocations.fair_share.queue import factor_of, queue_key
from allocations.quotas import algebra
from placement import Node
from twin.policy import Policy
from twin.replay.modes import MODES, PassMemo, Reclaim, Start, admit
from twin.replay.periods import Periods
from twin.replay.rules import FairShareClock, IdleWatch, window_steps
from twin.replay.state import Holding, Pools, partition, workload_of
from twin.replay.world import World
from twin.workload import Job

END, LEAVE, IDLE, WINDOW, NOTICE, ARRIVE = 0, 1, 2, 3, 4, 5  # at one instant: what frees first, quota edges, then arrivals


@dataclass
class JobRecord:
    job: Job
    department: int
    in_guarantee: bool = False
    first_start: float | None = None
    finish: float | None = None
    restarts: int = 0


@dataclass(frozen=True)
class Run:
    """A unit-set of a grant held from ``start`` to ``end``: ``held`` GPU-equivalents booked,
    ``native`` those its request asks; ``lost``: ended by a reclaim."""

    record: int
    department: int
    start: float
    end: float
    held: float
    native: float
    busy: float
    lost: bool = False


@dataclass
class Outcome:
    policy: str
    records: list[JobRecord]
    runs: list[Run]
    horizon: float
    stop: float
    installed: int
    reclaims: int = 0
    events: int = 0
    wall_s: float = 0.0
    departments: tuple[str, ...] = ()
    guarantees: tuple[float, ...] = ()
    notice_s: float = 0.0
    idle_warnings: int = 0  # grants an idle policy warned
    idle_reclaims: int = 0  # grants an idle policy reclaimed (ended after their notice)
    window_edges: int = 0  # changes of a department's effective quota replayed
    shrink_reclaims: int = 0  # grants a window's lower limit took back (shrink policy ``reclaim``)


@dataclass(order=True)
class _Entry:
    key: tuple[float, ...]
    record: int = field(compare=False)
    job: Job = field(compare=False)


@dataclass
class _Promise:
    entry: _Entry | None  # None: a window's shrink took the victims back, for nobody
    left: int  # victims still running out their notice
    start: Start | None  # its units, booked where the victims' units were
    decided: float = 0.0  # when the reclaim was decided


class Replay:
    def __init__(self, jobs: Sequence[Job], nodes: Sequence[Node], policy: Policy, mode: str, *,
                 horizon: float | None = None, drain_s: float = 86400.0) -> None:
        self.mode = MODES[mode]
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
        self.buckets: dict[tuple[object, ...], list[_Entry]] = {}
        self.memo = PassMemo()  # the pass under way's (``_pass``)
        self.promises: dict[int, _Promise] = {}
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

    def _enqueue(self, record: int, job: Job) -> None:
        self.world.waiting[self.world.department(job)] += job.milli / 1000
        heapq.heappush(self.buckets.setdefault(self._bucket_of(job), []), _Entry(self._key(job), record, job))

    def run(self) -> Outcome:
        for index, job in enumerate(self.jobs):
            self._push(job.eligible_at, ARRIVE, index)
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
        that ask different periods are not identical, nor (with flavors' quotas) two flavors."""
        return _bucket(job, period=self.world.periods is not None, flavor=self.world.flavored)

    def _order(self, entry: _Entry) -> tuple[float, ...]:
        """A bucket head's place in a pass: priority, then (with fair share) its department's
        factor, the least served first, then submission."""
        if self.fair is None:
            return entry.key
        priority, submitted, line = entry.key
        factor = factor_of(self.world.fair_share, self.world.department(entry.job))
        return queue_key(priority=-int(priority), factor=factor, submitted=submitted, tiebreak=int(line))

    def _try(self, entry: _Entry, memo: PassMemo) -> bool:
        outcome = admit(self.mode, self.world, entry.job, memo, self.reclaim_depth)
        if outcome is None:
            return False
        if isinstance(outcome, Start):
            self._start(entry, outcome)
        else:
            self._reclaim(entry, outcome)
        return True

    def _start(self, entry: _Entry, start: Start, *, since: float | None = None) -> None:
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

    def _reclaim(self, entry: _Entry, reclaim: Reclaim) -> None:
        """Mark the victims' units leaving (they leave the GPUs now), book the request there, and
        start it once the last victim's notice ends."""
        self.reclaims += 1
        leaving = [(self.world.mark_leaving(victim), victim.units) for victim in reclaim.victims]
        units = self.world.pools.place_all(reclaim.pool, reclaim.request, entry.job.quantity)
        start = Start(units, reclaim.per_unit, reclaim.pool) if units is not None else None
        self._take(entry, leaving, start)

    def _take(self, entry: _Entry | None, leaving: list[tuple[Holding, int]], start: Start | None) -> None:
        """The victims run out their notice (each its class's) for ``entry`` (None: for nobody)."""
        promise_id = self._seq + 1
        self.promises[promise_id] = _Promise(entry, len(leaving), start, self.now)
        for holding, count in leaving:
            notice = self.world.priority_class(holding.job).notice_s
            self._seq += 1
            heapq.heappush(self.events, (self.now + notice, LEAVE, self._seq, _pack(promise_id, holding.gid, count)))

    def _promise_since(self, promise: _Promise) -> float | None:
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
        promise_id, gid, units = _unpack(packed)
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


def _bucket(job: Job, *, period: bool = False, flavor: bool = False) -> tuple[object, ...]:
    """``flavor``: flavors' quotas weigh: requests of two flavors of one shape are not identical."""
    key: tuple[object, ...] = (job.department, job.priority_class, job.shape, job.quantity)
    if period:
        key += (job.requested_s,)
    return key + (job.flavor,) if flavor else key


_UNITS = 1 << 20
_GRANTS = 1 << 40


def _pack(promise: int, gid: int, units: int) -> int:
    return (promise * _GRANTS + gid) * _UNITS + units


def _unpack(packed: int) -> tuple[int, int, int]:
    rest, units = divmod(packed, _UNITS)
    promise, gid = divmod(rest, _GRANTS)
    return promise, gid, units


def replay(jobs: Sequence[Job], nodes: Sequence[Node], policy: Policy, mode: str, *, horizon: float | None = None,
           drain_s: float = 86400.0) -> Outcome:
    return Replay(jobs, nodes, policy, mode, horizon=horizon, drain_s=drain_s).run()


__all__ = ["JobRecord", "Outcome", "Replay", "Run", "replay"]

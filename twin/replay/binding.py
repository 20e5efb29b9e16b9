"""Which level of its quota chain held each department's waiting demand back, and for how long.

``BindingReplay`` is the replay (``engine.Replay``) that, while a request waits, keeps the verdict
of its last try as admission gives it (``verdict``), and adds up, per department, the GPU-hours
of demand waiting under each verdict: GPU-equivalents waiting × the time they waited. Nothing it
does changes a decision: it only asks the same pure rules again, after the fact.

The verdict of a refused try is the portal's (``allocations.admission.planning._taking``): the
quota checks with every grant the request may take gone (``victims.plan`` without the GPUs; the
checks as they stand where a policy takes nothing); if they still fail, the refusal names the first failing quota (``wording.QuotaWords.worst_failing``:
on the twin's checks, which have no steps of time, the first of ``Plan.failing``), and that
quota's department is the *level*: the department's own (``own``), a department above it
(``parent``), the organisation's quota of the installed GPUs (``organisation``), or any of those
while a quota window sets its numbers, or a class's share that a window sets (``window``), each
with the flavor where it is the department's quota of a flavor. With such shares or flavors'
quotas the checks are admission's over the request's period (``World.weigh``). If the quota
checks pass, or pass once victims are taken, the GPUs refused (``capacity``). A request booked where reclaimed grants run out
their notice waits for them (``notice``). The twin has no project caps: no level is a project's.

A bucket of identical requests (``Replay._bucket_of``) waits under the verdict of its head; a bucket
not tried in a pass keeps the verdict of its last try unless something changed since
(``World.version``), when the verdict is asked again (memoised per version).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from allocations.quotas import algebra, victims
from allocations.quotas.stepped import unstepped
from placement import Node
from twin.policy import Policy
from twin.replay.engine import Outcome, Replay
from twin.replay.modes import PassMemo, per_unit
from twin.replay.records import Entry
from twin.replay.world import ROOT
from twin.workload import Job

HOUR = 3600.0
OWN, PARENT, ORGANISATION, WINDOW, CAPACITY, NOTICE = "own", "parent", "organisation", "window", "capacity", "notice"
KINDS = (OWN, PARENT, ORGANISATION, WINDOW, CAPACITY, NOTICE)

Verdict = tuple[str, int, str]
"""(kind, the quota's department: 1..n, ROOT, or -1 for capacity and notice, the flavor whose quota
of the department's it is: "" for the department's own)."""


@dataclass(frozen=True)
class Level:
    """One level that held a department's demand back: its ``kind``, the department whose quota it
    is (``department``; empty for ``organisation``, ``capacity`` and ``notice``), the GPU-hours
    of demand that waited under it (``gpu_h``) and, for that department's quota of a flavor, the
    flavor (``flavor``; empty for its own quota)."""

    kind: str
    department: str
    gpu_h: float
    flavor: str = ""


@dataclass
class Binding:
    """Per department (by name), the GPU-seconds of demand that waited under each (kind, quota's
    department), or (kind, quota's department, flavor) for a department's quota of a flavor, and
    each department's chain of quotas, nearest first."""

    waiting: dict[str, dict[tuple[str, ...], float]] = field(default_factory=dict)
    chains: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def levels(self, department: str) -> list[Level]:
        """Each quota of the department's chain (its own, then those above it), then any other
        level that held it back, most first."""
        found = self.waiting.get(department, {})
        chain = self.chains.get(department, (department,))
        out = [Level(OWN if depth == 0 else PARENT, name, found.get((OWN if depth == 0 else PARENT, name), 0.0) / HOUR)
               for depth, name in enumerate(chain)]
        rest = sorted(((seconds, key) for key, seconds in found.items() if key[0] not in (OWN, PARENT) or len(key) > 2),
                      key=lambda item: (-item[0], item[1]))
        out.extend(Level(key[0], key[1], seconds / HOUR, *key[2:]) for seconds, key in rest)
        return out


class BindingReplay(Replay):
    """The replay, adding up which level held the waiting demand back (see the module's docstring)."""

    def __init__(self, jobs: Sequence[Job], nodes: Sequence[Node], policy: Policy, mode: str, *,
                 horizon: float | None = None, drain_s: float = 86400.0) -> None:
        super().__init__(jobs, nodes, policy, mode, horizon=horizon, drain_s=drain_s)
        self.binding = Binding()
        self._totals: dict[tuple[int, Verdict], float] = defaultdict(float)  # GPU-equivalent-seconds waiting
        self._verdicts: dict[tuple[object, ...], tuple[int, Verdict]] = {}  # bucket -> (version, verdict)
        self._asked: tuple[int, dict[tuple[object, ...], Verdict]] = (-1, {})  # verdicts asked at a version
        self._rate: dict[tuple[int, Verdict], float] = {}  # (department, verdict) -> GPU-equivalents waiting
        self._since = 0.0
        self._windowed: set[tuple[int, int | None]] = set()  # quotas (department, flavor) a window sets now
        flavors = policy.flavor_numbers
        self._flavor_names = {number: name for name, number in flavors.items()}
        self._base: dict[tuple[int, int | None], tuple[Decimal, Decimal]] = {}
        for index, department in enumerate(policy.departments, start=1):
            self._base[(index, None)] = (department.guarantee, department.limit)
            self._base |= {(index, flavors[q.flavor]): (q.guarantee, q.limit) for q in department.flavor_quotas}

    def _try(self, entry: Entry, memo: PassMemo) -> bool:
        started = super()._try(entry, memo)
        if not started:
            self._verdicts[self._bucket_of(entry.job)] = (self.world.version, self.verdict(entry.job))
        return started

    def _window(self, index: int) -> None:
        super()._window(index)
        step = self.steps[index]
        if step.priority_class is not None:
            return  # a class's share exists only while a window sets it: a check of it is a window's
        quota = (step.department, step.flavor)
        windowed = (step.guaranteed, step.limit) != self._base[quota]
        (self._windowed.add if windowed else self._windowed.discard)(quota)

    def _pass(self, only: set[tuple[object, ...] | None] | None) -> None:
        self._add_until(self.now)
        super()._pass(only)
        self._rate_rebuild()

    def _close(self) -> None:
        self._add_until(self.stop)
        super()._close()

    def run(self) -> Outcome:
        outcome = super().run()
        names = {index: d.name for index, d in enumerate(self.world.policy.departments, start=1)}
        for index, name in names.items():
            self.binding.chains[name] = tuple(names[d] for d in self.world.tree.chain(index) if d in names)
        for (department, (kind, quota, flavor)), seconds in self._totals.items():
            key = (kind, names.get(quota, ""), *((flavor,) if flavor else ()))
            waiting = self.binding.waiting.setdefault(names[department], {})
            waiting[key] = waiting.get(key, 0.0) + seconds
        return outcome

    # ------------------------------------------------------------------ adding up
    def _add_until(self, now: float) -> None:
        elapsed = now - self._since
        if elapsed > 0:
            for key, amount in self._rate.items():
                self._totals[key] += amount * elapsed
        self._since = max(self._since, now)

    def _rate_rebuild(self) -> None:
        """What waits from now on, and under which verdict."""
        rate: dict[tuple[int, Verdict], float] = defaultdict(float)
        for key, entries in self.buckets.items():
            if not entries:
                continue
            job = entries[0].job
            known = self._verdicts.get(key)
            verdict = known[1] if known is not None and known[0] == self.world.version else self.verdict(job)
            self._verdicts[key] = (self.world.version, verdict)
            rate[(self.world.department(job), verdict)] += sum(entry.job.milli for entry in entries) / 1000
        for promise in self.promises.values():
            if promise.entry is None:
                continue  # a shrink's: nobody waits for its room
            job = promise.entry.job
            rate[(self.world.department(job), (NOTICE, -1, ""))] += job.milli / 1000
        self._rate = dict(rate)

    # ------------------------------------------------------------------ the verdict
    def verdict(self, job: Job) -> Verdict:
        """Why ``job`` cannot start now, as admission's refusal would name it (the module's docstring)."""
        if not self.mode.quotas:
            return (CAPACITY, -1, "")
        ask = self.world.ask(job, per_unit(self.mode, job) * job.quantity)
        key: tuple[object, ...] = (ask.department_id, ask.amounts[None], ask.factor, ask.priority, ask.preempts_lower)
        if self.world.weighs_all:  # weighed over its period, in its class's share and its flavor's quota too
            key += (job.priority_class, job.flavor, job.requested_s)
        if self._asked[0] != self.world.version:
            self._asked = (self.world.version, {})
        known = self._asked[1].get(key)
        if known is None:
            known = self._asked[1][key] = self._verdict(job, ask)
        return known

    def _verdict(self, job: Job, ask: algebra.Ask) -> Verdict:
        world = self.world
        weighed = world.weigh(job, ask) if world.weighs_all else None  # a share or a flavor's quota counts its own
        if weighed.quota_fits() if weighed is not None else world.quota_fits(ask):
            return (CAPACITY, -1, "")
        tree = weighed.tree if weighed is not None else world.tree
        if self.mode.reclaims:
            plan = (victims.plan(tree, weighed.grants, weighed.ask) if weighed is not None
                    else victims.plan(tree, world.grants(), ask, view=world.view()))
            if plan.admitted:
                return (CAPACITY, -1, "")
            failing = plan.failing
        elif weighed is not None:
            failing = [c for c in algebra.checks_from_totals(tree, weighed.totals, weighed.ask) if not c.fits]
        else:  # nothing is taken: the checks as they stand
            failing = [c for c in algebra.checks_from_totals(tree, world.held, ask) if not c.fits]
        quota = failing[0].department_id
        if quota == ROOT:
            return (ORGANISATION, ROOT, "")
        scope, _ = unstepped(failing[0].scope)
        base = scope[2] if isinstance(scope, tuple) and _a_share(scope) else scope  # a class's share: its quota's scope
        flavor = self._flavor_names.get(base, "") if isinstance(base, int) else ""
        if (quota, scope) in self._windowed or _a_share(scope):
            return (WINDOW, quota, flavor)
        return (OWN if quota == ask.department_id else PARENT, quota, flavor)


def _a_share(scope: algebra.Scope) -> bool:
    """Whether a check's scope (out of its step of time) is a class's share."""
    return isinstance(scope, tuple) and scope[0] == "class"


def binding_replay(jobs: Sequence[Job], nodes: Sequence[Node], policy: Policy, mode: str, *,
                   horizon: float | None = None, drain_s: float = 86400.0) -> tuple[Outcome, Binding]:
    """Replay ``jobs`` (as ``engine.replay``) and say which level held each department's demand back."""
    replay = BindingReplay(jobs, nodes, policy, mode, horizon=horizon, drain_s=drain_s)
    outcome = replay.run()
    return outcome, replay.binding


__all__ = ["KINDS", "Binding", "BindingReplay", "Level", "binding_replay"]

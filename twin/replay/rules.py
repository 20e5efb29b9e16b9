"""The portal's rules over time in a replay (docs/twin.md, "The replay"), each through the pure
function the portal's services call:

* **quota windows**: each department's effective guarantee and limit over the replay, the step
  function of ``allocations.quotas.windows.timeline`` (precedence, deltas, recurring rules in their
  time zones); each step's start is an event of the replay, where the department's quota in the
  tree changes (a shrink lets what holds run under the portal's ``wait`` shrink policy; under
  ``reclaim`` the edge takes back what holds beyond the lower limit, with notice: ``engine``);
* **idle policies**: the policy that watches a grant (``allocations.grants.idle_matching.policy_for``),
  and the idle ladder (``allocations.grants.idle_ladder.step``) asked at the evaluation's 5-minute
  ticks with the grant's buckets, each reading its ``busy`` fraction as the activity: the tick it
  warns and the tick it acts (reclaim: the grant ends after its class's notice, and the request is
  not queued again, as the portal does not resubmit it; notify: a warning only);
* **fair share**: each department's usage decayed with the half-life and grown by what it holds
  (``allocations.fair_share.tree.decayed``, ``held_decayed``), ranked by Slurm's Fair Tree
  (``fair_tree``) over the departments as they nest (``department_forest``, as the portal's
  fair-share table builds it): waiting requests of one priority are tried in the order of their department's
  factor (the least served first), and among victims of equal priority the lowest factor is taken
  first (``algebra.Grant.fair_share``), as in the portal's approvals queue and victim choice.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from allocations.fair_share.tree import decayed, department_factors, department_forest, fair_tree, held_decayed
from allocations.grants import idle_ladder as ladder
from allocations.grants.idle_matching import PolicyScope, policy_for
from allocations.quotas import windows
from twin.policy import Policy
from twin.policy_rules import IdleRule, WindowRule
from twin.workload import Job

TICK = 300.0  # the idle evaluation's beat, one bucket


@dataclass(frozen=True)
class QuotaStep:
    at: float  # seconds of the replay
    department: int  # 1..n, as the quota tree numbers them
    guaranteed: Decimal
    limit: Decimal
    reclaims: bool = False  # a lower limit at an edge of a window of shrink policy ``reclaim``
    priority_class: int | None = None  # the class whose share it is (its number, ``Policy.class_numbers``)
    flavor: int | None = None  # on the department's quota of this flavor (its number, ``Policy.flavor_numbers``)


def window_steps(policy: Policy, stop: float) -> list[QuotaStep]:
    """Every change of a department's effective quota over ``[0, stop)`` (its numbers at 0 first),
    of its quota of a flavor that a window is on, and of each share of one priority class that a
    window of the class sets, at that class's windows' edges (at one instant: the department's,
    then its flavors', each quota before its classes' shares). A step reclaims as the portal's
    tick does (``allocations.windows.tick``): its limit is lower than the step's before, and a
    window of shrink policy ``reclaim`` of that scope (the quota, or the class's share of it) has
    an edge there."""
    end = policy.start + datetime.timedelta(seconds=stop)
    flavors = policy.flavor_numbers
    out: list[QuotaStep] = []
    for index, department in enumerate(policy.departments, start=1):
        quotas: dict[str | None, tuple[Decimal, Decimal]] = {None: (department.guarantee, department.limit),
                  **{quota.flavor: (quota.guarantee, quota.limit) for quota in department.flavor_quotas}}
        for flavor, (guaranteed, limit) in quotas.items():
            rules = [(rule, policy.window_spec(rule)) for rule in policy.windows
                     if rule.department == department.name and rule.flavor == flavor]
            number = flavors[flavor] if flavor is not None else None
            out += _quota_steps(rules, (index, number), (guaranteed, limit), (policy.start, end))
    return sorted(out, key=lambda step: (step.at, step.department, step.flavor or 0, step.priority_class or 0))


def _quota_steps(rules: list[tuple[WindowRule, windows.WindowSpec]], quota: tuple[int, int | None],
                 numbers: tuple[Decimal, Decimal], span: tuple[datetime.datetime, datetime.datetime]) -> list[QuotaStep]:
    """The steps of one quota (``quota``: the department and the flavor whose quota of the
    department's it is, or None; ``numbers``: its own guarantee and limit) over ``span``, and of
    its classes' shares."""
    (department, flavor), (guaranteed, limit), (start, end) = quota, numbers, span
    specs = [spec for _, spec in rules]
    out: list[QuotaStep] = []
    for class_id in [None, *sorted({spec.priority_class_id for spec in specs if spec.priority_class_id is not None})]:
        if not any(spec.priority_class_id == class_id for spec in specs):
            continue
        steps = windows.timeline(guaranteed=guaranteed, limit=limit, windows=specs, span=span, priority_class_id=class_id)
        reclaiming = [spec for rule, spec in rules if rule.shrink_policy == "reclaim" and spec.priority_class_id == class_id]
        edges = {edge.at for edge in windows.edges(reclaiming, start, end)} if reclaiming else set()
        # a share changes with the quota's windows too, but the portal's tick records (and
        # shrinks) it at the edges of the class's own windows only
        own = {edge.at for edge in windows.edges([spec for spec in specs if spec.priority_class_id == class_id],
                                                 start, end)} if class_id is not None else None
        before: Decimal | None = None
        for step in steps:
            at = (step.start - start).total_seconds()
            lower = before is not None and step.effective.limit < before
            if own is None or at <= 0 or step.start in own:
                out.append(QuotaStep(at, department, step.effective.guaranteed, step.effective.limit,
                                     lower and at > 0 and step.start in edges, class_id, flavor))
            before = step.effective.limit
    return out


@dataclass(frozen=True)
class IdleTimes:
    warned_at: float
    acts_at: float | None  # None: the policy only notifies, or the grant ends first
    rule: IdleRule


class IdleWatch:
    """Which idle policy watches a grant, and when the ladder warns and acts on it."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.departments = {d.name: k for k, d in enumerate(policy.departments, start=1)}
        self.classes = policy.class_numbers
        self.rules = {rule.policy_id: rule for rule in policy.idle_policies}
        parents = {d.name: d.parent for d in policy.departments}
        self.chains: dict[str, list[int]] = {}  # a department and its ancestors, nearest first (a policy's subtree)
        for name in self.departments:
            chain: list[int] = []
            current: str | None = name
            while current is not None:
                chain.append(self.departments[current])
                current = parents[current]
            self.chains[name] = chain
        self.scopes = [PolicyScope(rule.policy_id, self.departments.get(rule.department or ""), None,
                                   self.classes.get(rule.priority_class or "")) for rule in policy.idle_policies]

    def _at(self, seconds: float) -> datetime.datetime:
        return self.policy.start + datetime.timedelta(seconds=seconds)

    def times(self, job: Job, start: float, end: float) -> IdleTimes | None:
        """When the ladder warns a grant started at ``start`` and running until ``end`` (its busy
        fraction in every bucket), and when it acts; None if it is never warned."""
        if not self.scopes:
            return None
        chosen = policy_for(self.scopes, chain=self.chains[job.department], cluster_id=None,
                            priority_class_id=self.classes[job.priority_class])
        if chosen is None:
            return None
        rule = self.rules[chosen]
        reading = ladder.reading_of(job.busy, threshold=rule.threshold)
        if reading is not ladder.Reading.IDLE:
            return None
        first = math.ceil(start / TICK) * TICK  # the grant's first whole bucket

        def ask(tick: float, case: ladder.OpenCase | None) -> ladder.Step:
            buckets = [ladder.Bucket(self._at(first + k * TICK), reading, job.busy)
                       for k in range(int((tick - first) // TICK))]
            return ladder.step(case=case, buckets=buckets, rules=rule.rules, now=self._at(tick),
                               last_bucket=self._at(tick - TICK))

        warned = self._first(ask, first + math.ceil(rule.rules.window_minutes / 5) * TICK, end, None, ladder.Move.WARN)
        if warned is None:
            return None
        tick, found = warned
        if rule.action != "reclaim":
            return IdleTimes(tick, None, rule)
        assert found.idle_since is not None
        case = ladder.OpenCase("warned", found.idle_since, self._at(tick), found.action_due_at)
        acted = self._first(ask, tick + math.ceil(rule.rules.grace_minutes / 5) * TICK, end, case, ladder.Move.ACT)
        return IdleTimes(tick, acted[0] if acted is not None else None, rule)

    @staticmethod
    def _first(ask: Callable[[float, ladder.OpenCase | None], ladder.Step], tick: float, end: float, case: ladder.OpenCase | None,
               move: ladder.Move) -> tuple[float, ladder.Step] | None:
        """The first tick from ``tick`` (a bucket earlier, in case) before ``end`` at which the
        ladder makes ``move``; a few ticks are asked at most (the readings never change)."""
        for at in (tick - TICK + k * TICK for k in range(4)):
            if at >= end:
                return None
            if at > 0:
                found = ask(at, case)
                if found.move is move:
                    return at, found
        return None


class FairShareClock:
    """Each department's decayed usage (GPU-equivalent-hours) and its Fair Tree factor."""

    def __init__(self, policy: Policy, half_life_s: float) -> None:
        self.half_life_s = half_life_s
        self.shares = {k: d.shares for k, d in enumerate(policy.departments, start=1)}
        self.usage = dict.fromkeys(self.shares, 0.0)
        self.children = department_children(policy)
        self.last = 0.0
        self._factors: dict[int, float] | None = None

    def advance(self, now: float, held: Mapping[int, float]) -> None:
        """Decay every usage to ``now`` and add what each department held since (held throughout)."""
        elapsed = now - self.last
        if elapsed <= 0:
            return
        for department, used in self.usage.items():
            self.usage[department] = decayed(used, elapsed, self.half_life_s) + held_decayed(
                held.get(department, 0.0), began_s_ago=elapsed, ended_s_ago=0.0, half_life_s=self.half_life_s)
        self.last, self._factors = now, None

    def factors(self) -> dict[int, float]:
        if self._factors is None:
            ranking = fair_tree(department_forest(self.children, self.shares, self.usage))
            self._factors = department_factors(ranking, self.children)
        return self._factors


def department_children(policy: Policy) -> dict[int | None, list[int]]:
    """Parent → its departments (numbered as the replay's tree numbers them, from 1), each group by
    name as the portal walks them (by slug), ``None`` the departments without a parent: the shape
    of the Fair Tree the portal ranks (``allocations.fair_share.tree.department_forest``)."""
    number = {department.name: k for k, department in enumerate(policy.departments, start=1)}
    children: dict[int | None, list[int]] = {}
    for department in sorted(policy.departments, key=lambda d: d.name):
        parent = None if department.parent is None else number[department.parent]
        children.setdefault(parent, []).append(number[department.name])
    return children

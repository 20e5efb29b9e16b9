"""The quota tree with quota windows: the effective numbers over an interval, as the algebra sees them.

Pure (no database): ``effective_tree.QuotaView.read`` reads the quotas and windows into it, and
the policy twin builds it from its policy file (``twin.replay.periods``).

Two readings of one interval ``[start, end)`` (a request's):

* **the lowest numbers** (``QuotaView.tree``): each quota's guarantee and limit are the least its
  approved windows leave at any moment of the interval (``windows.lowest``), its lending limit at
  most that guarantee; each priority class one of its windows targets gets its share as a scope of
  its own (``algebra.class_scope``), capped (``Limit.cap``) where a window of the class sets that
  limit: no oversubscription factor raises what an administrator wrote for a class. Checked against
  everything held over the interval, it is conservative: what fits it fits at every moment. Most
  approvals stop there.
* **step by step** (``QuotaView.stepped``), when windows change a number within the interval or a
  grant starts or ends within it: the interval is cut where any window's edge falls and where any
  grant given starts or ends (``in_use.edges``, the rule the display cuts by), and each step is a
  scope of its own (``("at", step, scope)``) with that step's numbers; a grant weighs only in the
  steps its own interval meets. The request must fit every step: its worst one binds
  (``binding_checks``), and two grants that never overlap are never added up. A request crossing a
  shrink must fit the shrunk quota next to what holds during the shrink, and a grant admitted under
  a raise that ends before the shrink is neither counted against it nor taken as "beyond the limit"
  there.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from allocations.quotas import algebra, windows
from allocations.quotas import in_use as timed

Step = tuple[datetime.datetime, datetime.datetime]


def step_scope(step: int, scope: algebra.Scope) -> algebra.Scope:
    return ("at", step, scope)


def unstepped(scope: algebra.Scope) -> tuple[algebra.Scope, int | None]:
    """The scope a check counts, and the step of time it counts it in (None: the whole interval)."""
    if isinstance(scope, tuple) and scope[0] == "at":
        return scope[2], scope[1]
    return scope, None


def binding_checks(checks: Sequence[algebra.Check]) -> list[algebra.Check]:
    """One check per quota (department and scope): of its steps, the one with the least room left
    once the request is in (the first of equals), the one the request must fit over its whole
    interval. Checks of no step pass through."""
    best: dict[tuple[int, algebra.Scope], algebra.Check] = {}
    for check in checks:
        key = (check.department_id, unstepped(check.scope)[0])
        known = best.get(key)
        room = check.effective_limit - check.holds - check.requested
        if known is None or room < known.effective_limit - known.holds - known.requested:
            best[key] = check
    return list(best.values())


def _may_be_in_force(spec: windows.WindowSpec, start: datetime.datetime, end: datetime.datetime) -> bool:
    """Leaves out, cheaply, the windows that cannot be in force over the interval (past festivals)."""
    if spec.begins_at >= end:
        return False
    return spec.kind != "temporary" or (spec.ends_at is not None and spec.ends_at > start)


def _cap(
    guaranteed: Decimal, limit: Decimal, found: list[windows.WindowSpec], start: datetime.datetime,
    end: datetime.datetime, priority_class_id: int,
) -> Decimal | None:
    """The least limit that a window of the class itself sets for its share at any moment of
    ``[start, end)``: a hard cap, which the class's oversubscription factor does not raise (None: no
    window of the class sets the limit then, and the share is the department's limit)."""
    own = {spec.id for spec in found if spec.priority_class_id == priority_class_id}
    steps = windows.timeline(guaranteed=guaranteed, limit=limit, windows=found, span=(start, end),
                             priority_class_id=priority_class_id)
    return min((step.effective.limit for step in steps if step.effective.limit_by in own), default=None)


@dataclass
class QuotaView:
    """The quotas and their approved windows (``rows``: id, department, flavor, guaranteed, limit,
    lending limit; ``specs``: each quota's windows by its id). A limit that a window of
    shrink policy ``wait`` lowered lets what holds beyond it run: ``Limit.kept`` is the limit
    without those windows, and only grants beyond it may be taken as oversubscribed."""

    parents: dict[int, int | None]
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    specs: dict[int, list[windows.WindowSpec]] = field(default_factory=dict)
    waiting: frozenset[int] = frozenset()  # the windows whose shrink policy is ``wait``
    # the numbers over an interval already asked (the view never changes once built): a replay asks
    # the same steps between the same grants' ends again and again
    _known: dict[tuple[datetime.datetime | None, datetime.datetime | None], tuple[
        dict[tuple[int, algebra.Scope], algebra.Limit], set[tuple[int, int, int | None]]
    ]] = field(default_factory=dict, compare=False, repr=False)
    # one step's numbers with their scopes made its own (``step_scope``), by step and position
    _scoped: dict[tuple[int, datetime.datetime | None, datetime.datetime | None], dict[
        tuple[int, algebra.Scope], algebra.Limit]] = field(default_factory=dict, compare=False, repr=False)

    def _lowest(
        self, guaranteed: Decimal, limit: Decimal, found: list[windows.WindowSpec], start: datetime.datetime,
        end: datetime.datetime, priority_class_id: int | None,
    ) -> tuple[windows.Effective, Decimal | None]:
        """The lowest numbers, and the limit the ``wait`` windows leave running (None: theirs is not lower)."""
        low = windows.lowest(guaranteed=guaranteed, limit=limit, windows=found, start=start, end=end,
                             priority_class_id=priority_class_id)
        others = [spec for spec in found if spec.id not in self.waiting]
        if len(others) == len(found):
            return low, None
        kept = windows.lowest(guaranteed=guaranteed, limit=limit, windows=others, start=start, end=end,
                              priority_class_id=priority_class_id).limit
        return low, kept if kept > low.limit else None

    def _limits(self, start: datetime.datetime | None, end: datetime.datetime | None) -> tuple[
        dict[tuple[int, algebra.Scope], algebra.Limit], set[tuple[int, int, int | None]]
    ]:
        known = self._known.get((start, end))
        if known is None:
            known = self._known[(start, end)] = self._limits_read(start, end)
        return known

    def _limits_read(self, start: datetime.datetime | None, end: datetime.datetime | None) -> tuple[
        dict[tuple[int, algebra.Scope], algebra.Limit], set[tuple[int, int, int | None]]
    ]:
        limits: dict[tuple[int, algebra.Scope], algebra.Limit] = {}
        shares: set[tuple[int, int, int | None]] = set()
        for quota_id, department_id, flavor_id, guaranteed, limit, lending in self.rows:
            found = ([spec for spec in self.specs.get(quota_id, ()) if _may_be_in_force(spec, start, end)]
                     if start is not None and end is not None else [])
            if start is None or end is None or not found:
                limits[(department_id, flavor_id)] = algebra.Limit(department_id, flavor_id, guaranteed, limit, lending)
                continue
            low, kept = self._lowest(guaranteed, limit, found, start, end, None)
            lends = min(lending, low.guaranteed) if lending is not None else None
            limits[(department_id, flavor_id)] = algebra.Limit(
                department_id, flavor_id, low.guaranteed, low.limit, lends, low.limit_by, kept
            )
            for class_id in sorted({spec.priority_class_id for spec in found if spec.priority_class_id is not None}):
                share, kept = self._lowest(guaranteed, limit, found, start, end, class_id)
                scope = algebra.class_scope(class_id, flavor_id)
                limits[(department_id, scope)] = algebra.Limit(
                    department_id, scope, share.guaranteed, share.limit, None, share.limit_by, kept,
                    _cap(guaranteed, limit, found, start, end, class_id),
                )
                shares.add((department_id, class_id, flavor_id))
        return limits, shares

    def tree(self, start: datetime.datetime | None = None, end: datetime.datetime | None = None) -> algebra.Tree:
        """The lowest numbers over ``[start, end)`` (without an interval: the quotas' own)."""
        limits, shares = self._limits(start, end)
        return algebra.Tree(parents=self.parents, limits=limits, class_shares=frozenset(shares))

    def steps(self, start: datetime.datetime, end: datetime.datetime, held: Iterable[timed.Held] = ()) -> list[Step]:
        """``[start, end)`` cut at every edge of a window within it and at every start and end of
        the ``held`` grants within it (one step: nothing changes within it)."""
        cuts = {start, end} | timed.edges(held, start, end)
        for found in self.specs.values():
            relevant = [spec for spec in found if _may_be_in_force(spec, start, end)]
            cuts |= {edge.at for edge in windows.edges(relevant, start, end) if start < edge.at < end}
        ordered = sorted(cuts)
        return list(zip(ordered, ordered[1:], strict=False))

    def stepped(
        self, start: datetime.datetime, end: datetime.datetime, held: Iterable[timed.Held] = ()
    ) -> SteppedTree | None:
        """The tree step by step over ``[start, end)`` (cut at the windows' edges and the ``held``
        grants' starts and ends); None when nothing changes within it."""
        steps = self.steps(start, end, held)
        if len(steps) < 2:
            return None
        limits: dict[tuple[int, algebra.Scope], algebra.Limit] = {}
        shares: set[tuple[int, int, int | None]] = set()
        changes: list[int] = []
        before: dict[tuple[int, algebra.Scope], algebra.Limit] | None = None
        for index, (begin, finish) in enumerate(steps):
            interval = (begin, finish) if self.specs else (None, None)
            found, found_shares = self._limits(*interval)
            shares |= found_shares
            limits.update(self._step_limits(index, interval, found))
            if found is not before and found != before:
                changes.append(index)
            before = found
        return SteppedTree(parents=self.parents, limits=limits, class_shares=frozenset(shares), steps=tuple(steps),
                           changes=tuple(changes))

    def _step_limits(
        self, index: int, interval: tuple[datetime.datetime | None, datetime.datetime | None],
        found: dict[tuple[int, algebra.Scope], algebra.Limit],
    ) -> dict[tuple[int, algebra.Scope], algebra.Limit]:
        """``found`` as step ``index``'s own scopes, made once per step and interval (a replay
        cuts the same steps between the same grants' ends again and again)."""
        key = (index, *interval)
        known = self._scoped.get(key)
        if known is None:
            known = self._scoped[key] = {
                (department_id, step_scope(index, scope)): dataclasses.replace(limit, scope=step_scope(index, scope))
                for (department_id, scope), limit in found.items()
            }
        return known


@dataclass
class SteppedTree(algebra.Tree):
    """A tree whose scopes are steps of time: ``class_amounts`` then ``timed`` place an amount."""

    steps: tuple[Step, ...] = ()
    changes: tuple[int, ...] = ()  # the steps whose numbers differ from the step before (the first always)

    def timed(
        self, amounts: Mapping[algebra.Scope, Decimal], starts_at: datetime.datetime, ends_at: datetime.datetime
    ) -> dict[algebra.Scope, Decimal]:
        """The amounts in every step ``[starts_at, ends_at)`` meets, and in no plain scope."""
        steps = self.steps
        # the steps are in order and touch: the first one ending after ``starts_at`` up to the
        # last one beginning before ``ends_at``
        first = bisect.bisect_right(steps, starts_at, key=lambda step: step[1])
        last = bisect.bisect_left(steps, ends_at, key=lambda step: step[0])
        return {step_scope(index, scope): amount for index in range(first, last) for scope, amount in amounts.items()}

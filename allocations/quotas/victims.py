"""The victim choice, pure: which grants a request may take, the facts that make each one a victim,
and how many of its units must go (``docs/quotas.md``, "Admission" and "Partial reclaim").

Facts are read from the grants as they will stand once the reclaims already under way are done: a
grant's units on their way out (``Grant.leaving``) rank nowhere, so a grant that a reclaim is making
room for never looks beyond a line because its victim still holds what it gives back. (The quota
checks still count those units until their notice ends.) Each fact names its line and how many of
the grant's units lie beyond it (the unit across the line counts as beyond):

* **borrowed** (for a request that keeps the child ``C`` of a department ``L`` on its path within
  ``C``'s guarantee): a grant of another child ``B`` of ``L`` beyond ``B``'s guarantee (basis
  ``guarantee``), or a grant of ``L``'s own projects (basis ``own-projects``: all of it);
* **oversubscribed** (for a request of factor 1, or of a higher priority): a grant that lies, wholly
  or partly, beyond the limit of a department on the request's chain (basis ``limit``: all of its
  units, since the request needs the department under that line);
* **lower-priority** (for a ``PreemptLowerPriority`` request): a grant of its own department's
  subtree of strictly lower priority (basis ``priority``: all of it).

What no fact overrides: a grant that a reclaim is making room for (its caller marks it not
``takeable``), and, for a request from outside the grant's department's subtree, the units of a
grant within its department's guarantee (the nearest department on its chain with a quota in each
scope; a unit beyond it in any scope is beyond). A request of nothing (a quota window's shrink
bringing a department within its own new limit) takes from its own subtree and is not held back
by guarantees.

The plan: victims in order (oversubscribed first, then lowest priority, the department furthest
over its fair share, newest), each taken as far as its facts allow until every check passes and the
units fit; then every victim the request can do without is given back (latest taken first); then
each victim still taken gives back only the units that must go, the most protected first. Every
victim's fact is checked against the grants once more before the plan is returned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from operator import attrgetter

from allocations.quotas.algebra import (
    ZERO,
    Ask,
    Check,
    Fact,
    Grant,
    Plan,
    Scope,
    Tree,
    Victim,
    _checks,
    _Holdings,
)
from allocations.quotas.victim_view import View as View  # the view moved there; its name stays here too
from allocations.quotas.victim_view import _units_of
from allocations.quotas.victim_view import part as part
from allocations.quotas.victim_view import staying as staying

_ID, _AGE, _FAIR_SHARE, _PRIORITY = (attrgetter(name) for name in ("allocation_id", "age", "fair_share", "priority"))

Cut = frozenset[tuple[int, int]]
"""Units taken: (allocation id, how many of its units), as the capacity callback is asked."""


def _note(facts: dict[int, Fact], found: Mapping[int, Fact]) -> None:
    """Keep the first fact found for each grant, unless a later one lets more of its units go (a
    grant noted again keeps its place in ``facts``; new ones follow in ``found``'s order)."""
    if not facts:
        facts.update(found)
        return
    known = facts.get
    facts.update({grant_id: fact for grant_id, fact in found.items()
                  if (had := known(grant_id)) is None or fact.units > had.units})


def _borrowed_under(view: View, level: int, path_child: int, scope: Scope, extra: Mapping[int, Decimal]) -> dict[int, Fact]:
    """If the request (``extra``: its department → its amount) keeps ``path_child`` within its
    guarantee, what borrows under ``level``: its own projects' grants, and its other children's
    grants beyond their guarantees."""
    tree = view.tree
    child_limit = tree.limits.get((path_child, scope))
    if child_limit is None or view.holdings.inner(path_child, scope, extra) > child_limit.guaranteed:
        return {}
    found: dict[int, Fact] = {}
    own = [grant for grant in view.by_department.get(level, ()) if staying(grant, scope) > 0]
    held = sum((staying(grant, scope) for grant in own), ZERO)
    for grant in own:
        found[grant.allocation_id] = Fact("borrowed", "own-projects", level, scope, held, ZERO, grant.units - grant.leaving)
    for sibling in tree.children.get(level, ()):
        if sibling != path_child:
            _note(found, view.beyond_facts(sibling, scope, view.guarantee_line(sibling, scope), why="borrowed",
                                           basis="guarantee"))
    return found


def _path_borrowed(view: View, ask: Ask, scope: Scope, up_to: int | None) -> dict[int, Fact]:
    """What borrows under each department of the request's chain, up to ``up_to`` (None: all)."""
    found: dict[int, Fact] = {}
    extra = {ask.department_id: ask.amounts.get(scope, ZERO)}
    for below in view.tree.chain(ask.department_id):
        path_child = view.tree.child_towards(below, ask.department_id)
        if path_child is not None:
            _note(found, _borrowed_under(view, below, path_child, scope, extra))
        if below == up_to:
            break
    return found


def _lower_priority(view: View, ask: Ask) -> dict[int, Fact]:
    return view.lower_facts(ask.department_id, ask.priority) if ask.preempts_lower else {}


def _may_take_beyond_limit(ask: Ask, grant: Grant) -> bool:
    return ask.factor <= 1 or ask.priority > grant.priority


def quota_facts(view: View, ask: Ask, failing: list[Check]) -> dict[int, Fact]:
    """Grant id → the fact that lets ``ask`` take it, for the checks that fail."""
    facts: dict[int, Fact] = {}
    for check in failing:
        scope, level = check.scope, check.department_id
        over = view.beyond_facts(level, scope, view.tree.limits[(level, scope)].beyond, why="oversubscribed",
                                 basis="limit")
        _note(facts, {gid: fact for gid, fact in over.items() if _may_take_beyond_limit(ask, view.by_id[gid])})
        _note(facts, _path_borrowed(view, ask, scope, level))
    _note(facts, _lower_priority(view, ask))
    return facts


def within_guarantee(view: View, ask: Ask) -> bool:
    """Whether the request keeps its department within its guarantee in every scope it touches (the
    nearest department with a quota in that scope answers)."""
    for scope, amount in ask.amounts.items():
        nearest = next((d for d in view.tree.chain(ask.department_id) if (d, scope) in view.tree.limits), None)
        if nearest is None:
            continue
        if view.holdings.inner(nearest, scope, {ask.department_id: amount}) > view.tree.limits[(nearest, scope)].guaranteed:
            return False
    return True


def room_facts(tree: Tree, grants: list[Grant], ask: Ask, *, local: set[int], view: View | None = None) -> dict[int, Fact]:
    """Grant id → the fact that lets ``ask`` take its GPUs for room, among the ``local`` grants (on
    the candidate clusters): those beyond some department's limit (for a request of factor 1, or of
    higher priority), those that borrow under a department of its chain (for a request within its
    guarantee), and lower-priority ones of its subtree (for a class that preempts). ``view``: a
    ``View`` of the same tree and grants, if the caller keeps one (it is read, not changed)."""
    view = _view_of(tree, grants, view)
    facts: dict[int, Fact] = {}
    for (department_id, scope), limit in sorted(tree.limits.items(), key=lambda item: str(item[0])):
        over = view.beyond_facts(department_id, scope, limit.beyond, why="oversubscribed", basis="limit")
        _note(facts, over if ask.factor <= 1 else  # then every grant beyond a limit may be taken
              {gid: fact for gid, fact in over.items() if _may_take_beyond_limit(ask, view.by_id[gid])})
    if within_guarantee(view, ask):
        for scope in ask.amounts:
            _note(facts, _path_borrowed(view, ask, scope, None))
    _note(facts, _lower_priority(view, ask))
    return {gid: fact for gid, fact in facts.items() if gid in local and view.by_id[gid].takeable}


def _view_of(tree: Tree, grants: list[Grant], view: View | None) -> View:
    """The caller's view if it is one of ``tree`` (its grants are the caller's word), else a new one."""
    return view if view is not None and view.tree is tree else View(tree, grants)


def fact_holds(view: View, ask: Ask, victim: Victim) -> bool:
    """Whether the victim's fact is true of the grants, and covers the units it gives back."""
    fact, grant = victim.fact, view.by_id.get(victim.allocation_id)
    if fact is None or grant is None or not grant.takeable or not 1 <= victim.units <= grant.units - grant.leaving:
        return False
    if victim.units > min(fact.units, view.free_units(grant, ask)):
        return False
    if fact.basis == "priority":
        return ask.preempts_lower and grant.priority < ask.priority and grant.department_id in view.subtree(ask.department_id)
    if fact.basis == "own-projects":
        return grant.department_id == fact.department_id and staying(grant, fact.scope) > 0
    if fact.basis == "guarantee":
        line = view.guarantee_line(fact.department_id, fact.scope)
    else:
        line = view.tree.limits[(fact.department_id, fact.scope)].beyond
        if not _may_take_beyond_limit(ask, grant):
            return False
    beyond = view.beyond(fact.department_id, fact.scope, line).get(grant.allocation_id)
    if beyond is None or line != fact.line:
        return False
    return fact.basis == "limit" or _units_of(grant, fact.scope, beyond) >= victim.units


def plan(
    tree: Tree,
    grants: list[Grant],
    ask: Ask,
    *,
    capacity_fits: Callable[[Cut], bool] | None = None,
    capacity_candidates: Mapping[int, Fact] | None = None,
    view: View | None = None,
) -> Plan:
    """Admit ``ask`` against ``grants``, taking victims, or the units of them that must go, if it
    needs them and may. ``capacity_fits(cut)`` says whether the request then fits on the GPUs;
    ``capacity_candidates`` are the grants (id → fact) it may take for room. ``view``: a ``View`` of
    the same tree and grants, if the caller keeps one (read, not changed): the plan then sums and
    ranks nothing the view already has."""
    by_id, holdings, view = _counted(tree, grants, view)
    checks = _checks(tree, holdings, ask)
    fits_now = capacity_fits(frozenset()) if capacity_fits is not None else True
    if all(check.fits for check in checks) and fits_now:
        return Plan(admitted=True, victims=(), checks=tuple(checks))
    failing = [check for check in checks if not check.fits]
    view = view or View(tree, grants, holdings)
    facts = quota_facts(view, ask, failing) if failing else {}
    room_ids = set(capacity_candidates or {}) if not fits_now else set()
    if room_ids:
        _note(facts, capacity_candidates or {})
    failing_keys = [(tree.subtree(check.department_id), check.scope) for check in failing]

    def helps(grant: Grant) -> bool:
        return grant.allocation_id in room_ids or any(
            grant.amounts.get(scope, ZERO) > 0 and grant.department_id in subtree for subtree, scope in failing_keys
        )

    # Each victim's cap (the units it may give) is counted as the plan reaches it, not for every
    # candidate first: most plans stop after a few. A grant that may give nothing has no place.
    candidates = _in_order(facts, [grant for grant_id in facts for grant in (by_id.get(grant_id),)
                                   if grant is not None and grant.takeable and helps(grant)])
    taking = _Taking(tree, ask, by_id, holdings, capacity_fits)
    usable = _Usable(candidates, lambda grant: min(facts[grant.allocation_id].units, grant.units - grant.leaving,
                                                   view.free_units(grant, ask)))
    ok, now, room = taking.first_passing(usable) if usable.reach(1) else (False, checks, fits_now)
    if not ok:
        return Plan(admitted=False, victims=(), checks=tuple(now), capacity_fits=room)
    order = list(taking.taken_grants)
    taking.prune()
    rank = {grant.allocation_id: index for index, grant in enumerate(order)}
    taking.trim(sorted(taking.taken, key=lambda gid: rank[gid], reverse=True))
    victims = tuple(
        Victim(gid, facts[gid].why, units, facts[gid]) for gid, units in sorted(taking.taken.items(), key=lambda i: rank[i[0]])
    )
    for victim in victims:
        if not fact_holds(view, ask, victim):
            raise RuntimeError(f"Victim #{victim.allocation_id}: its fact does not hold ({victim.fact}).")
    return Plan(admitted=True, victims=victims, checks=tuple(_checks(tree, holdings, ask)))


def _counted(tree: Tree, grants: list[Grant], view: View | None) -> tuple[dict[int, Grant], _Holdings, View | None]:
    """The grants by id and their holdings (the plan's to change), from the caller's view if it has
    one of ``tree``, and that view (else None: made only if the plan needs one)."""
    if view is not None and view.tree is tree:
        return view.by_id, _Holdings(tree, (), view.holdings.own), view
    return {grant.allocation_id: grant for grant in grants}, _Holdings(tree, grants), None


def _in_order(facts: Mapping[int, Fact], grants: list[Grant]) -> list[Grant]:
    """The order victims are taken in: oversubscribed first, then lowest priority, the department
    furthest over its fair share, newest."""
    # Stable sorts from the least significant key up order them as one sort on (not oversubscribed,
    # priority, fair share, -age, id) would: ids are unique, so that order is total.
    ranked = sorted(grants, key=_ID)
    ranked.sort(key=_AGE, reverse=True)
    ranked.sort(key=_FAIR_SHARE)
    ranked.sort(key=_PRIORITY)
    return [grant for grant in ranked if facts[grant.allocation_id].why == "oversubscribed"] + [
        grant for grant in ranked if facts[grant.allocation_id].why != "oversubscribed"]


class _Usable:
    """The candidates that may give something, in the victims' order, each with the units it may
    give (``units_of``), counted only as far as a search reaches (most plans need a few)."""

    def __init__(self, candidates: list[Grant], units_of: Callable[[Grant], int]):
        self._rest, self._units_of = iter(candidates), units_of
        self.grants: list[Grant] = []
        self.units: list[int] = []

    def reach(self, count: int) -> int:
        """How many usable candidates there are, up to ``count`` (fewer: there are no more)."""
        while len(self.grants) < count:
            grant = next(self._rest, None)
            if grant is None:
                break
            units = self._units_of(grant)
            if units > 0:
                self.grants.append(grant)
                self.units.append(units)
        return min(count, len(self.grants))


class _Taking:
    """The units taken so far, with the holdings they leave."""

    def __init__(self, tree: Tree, ask: Ask, by_id: dict[int, Grant], holdings: _Holdings,
                 capacity_fits: Callable[[Cut], bool] | None):
        self.tree, self.ask, self.by_id, self.holdings, self.capacity_fits = tree, ask, by_id, holdings, capacity_fits
        self.taken: dict[int, int] = {}
        self.taken_grants: list[Grant] = []  # the leading candidates taken, in order (``first_passing``)

    def put(self, grant_id: int, units: int) -> None:
        grant = self.by_id[grant_id]
        old = self.taken.get(grant_id, 0)
        if old:
            self.holdings.with_back(part(grant, old))
        if units:
            self.holdings.without(part(grant, units))
            self.taken[grant_id] = units
        else:
            self.taken.pop(grant_id, None)

    def passes(self) -> tuple[bool, list[Check], bool]:
        checks = _checks(self.tree, self.holdings, self.ask)
        quota = all(check.fits for check in checks)
        room = self.capacity_fits(frozenset(self.taken.items())) if self.capacity_fits is not None else True
        return quota and room, checks, room

    def first_passing(self, usable: _Usable) -> tuple[bool, list[Check], bool]:
        """Take the fewest leading candidates with which the request passes (all of them if it
        never does), and the last ``passes`` of that many: what taking one candidate after another
        until it passes gives. Taking more never makes a check fail nor the GPUs fuller, so passing
        is monotone in how many lead: the count is found by doubling, then halving, in a number of
        ``passes`` that grows as its logarithm (a cluster-wide order may need tens of victims before
        one frees room where the request fits)."""
        failing, count = 0, 1  # no candidate at all fails (the plan's own first test)
        while True:
            reached = usable.reach(count)
            self._lead(usable, reached)
            last = self.passes()
            if last[0]:
                break
            if reached < count or usable.reach(count + 1) == reached:
                return last  # every usable candidate taken, and still it does not pass
            failing, count = reached, count * 2
        passing, answer = reached, last
        while passing - failing > 1:
            middle = (failing + passing) // 2
            self._lead(usable, middle)
            last = self.passes()
            if last[0]:
                passing, answer = middle, last
            else:
                failing = middle
        self._lead(usable, passing)
        self.taken = {grant.allocation_id: units for grant, units in zip(usable.grants[:passing], usable.units[:passing], strict=True)}
        return answer

    def _lead(self, usable: _Usable, count: int) -> None:
        """Take exactly the first ``count`` usable candidates, each with all the units it may give."""
        taken = len(self.taken_grants)
        for index in range(taken - 1, count - 1, -1):
            self.put(usable.grants[index].allocation_id, 0)
        for index in range(taken, count):
            self.put(usable.grants[index].allocation_id, usable.units[index])
        self.taken_grants = usable.grants[:count]

    def prune(self) -> None:
        """Give back every victim the request can do without, latest taken first. Where a run of
        victims can all go at once, each would go in turn too (each turn then leaves more taken than
        the run gone does), so a run is tried whole, and halved where it cannot go: the same victims
        are given back, in fewer ``passes`` when few are needed."""
        latest_first = list(reversed(list(self.taken)))
        start, size = 0, 1  # the latest is tried alone: it is the one the request passed with
        while start < len(latest_first):
            run = latest_first[start:start + size]
            units = [self.taken[grant_id] for grant_id in run]
            for grant_id in run:
                self.put(grant_id, 0)
            if self.passes()[0]:
                start += len(run)
            elif len(run) > 1:
                for grant_id, count in zip(run, units, strict=True):
                    self.put(grant_id, count)
                size = len(run) // 2
                continue
            else:
                self.put(run[0], units[0])
                start += 1
            size = len(latest_first) - start

    def trim(self, grant_ids: list[int]) -> None:
        """Each victim in turn keeps every unit the request can do without (the fewest that must go,
        found by halving: taking more units never makes a check fail, nor the GPUs fuller)."""
        for grant_id in grant_ids:
            units = self.taken[grant_id]
            low, high = 1, units
            while low < high:
                middle = (low + high) // 2
                self.put(grant_id, middle)
                if self.passes()[0]:
                    high = middle
                else:
                    low = middle + 1
            self.put(grant_id, low)
            if low < units and not self.passes()[0]:
                self.put(grant_id, units)

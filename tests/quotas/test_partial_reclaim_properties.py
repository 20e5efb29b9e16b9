"""Hypothesis properties of partial reclaim (``allocations.quotas.victims.plan``), held against a
ledger recomputed here: random holdings of grants of several units (whole GPUs, half GPUs, 1g.10gb
slices) under an organisation with two departments, and a random request.

* an admitted plan passes every check once its victims' units are gone, and no victim could keep
  one more of its units (nor be given back whole);
* a victim never gives back more units than it has, and a whole-grant victim is one no part of
  would do;
* a victim taken for a request of the other department never gives back a unit that lies within
  its own department's guarantee (its grants ranked by priority, then age);
* a grant marked untakeable (a reclaim's beneficiary) is never a victim.
"""

from __future__ import annotations

from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocations.quotas import algebra, victims

D = Decimal
ROOT, LEFT, RIGHT = 1, 2, 3
WEIGHTS = (D(1), D("0.5"), D("0.1429"))
CLASSES = ((100, D("1.5"), False), (1000, D(1), False), (1000, D(1), True), (10000, D(1), True))
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _tree(root_limit: int, guarantees: tuple[int, int], limits: tuple[int, int]) -> algebra.Tree:
    limits_by_key: dict[tuple[int, algebra.Scope], algebra.Limit] = {
        (ROOT, None): algebra.Limit(ROOT, None, D(0), D(root_limit))
    }
    for department, guaranteed, limit in zip((LEFT, RIGHT), guarantees, limits, strict=True):
        limits_by_key[(department, None)] = algebra.Limit(department, None, D(guaranteed), D(max(limit, guaranteed)))
    return algebra.Tree(parents={ROOT: None, LEFT: ROOT, RIGHT: ROOT}, limits=limits_by_key)


def _grant(pk: int, department: int, units: int, weight: Decimal, klass: int, takeable: bool) -> algebra.Grant:
    priority = CLASSES[klass][0]
    return algebra.Grant(pk, department, {None: (weight * units).quantize(D("0.0001"))}, priority, age=pk,
                         takeable=takeable, units=units)


@st.composite
def worlds(draw: st.DrawFn) -> tuple[algebra.Tree, list[algebra.Grant], algebra.Ask]:
    guarantees = (draw(st.integers(0, 8)), draw(st.integers(0, 8)))
    limits = (draw(st.integers(0, 14)), draw(st.integers(0, 14)))
    tree = _tree(draw(st.integers(sum(guarantees), 20)), guarantees, limits)
    grants = [
        _grant(pk, draw(st.sampled_from((LEFT, RIGHT))), draw(st.integers(1, 6)), draw(st.sampled_from(WEIGHTS)),
               draw(st.integers(0, 3)), takeable=draw(st.integers(0, 9)) > 0)
        for pk in range(1, draw(st.integers(1, 8)) + 1)
    ]
    priority, factor, preempts = CLASSES[draw(st.integers(0, 3))]
    amount = (draw(st.sampled_from(WEIGHTS)) * draw(st.integers(1, 4))).quantize(D("0.0001"))
    ask = algebra.Ask(draw(st.sampled_from((LEFT, RIGHT))), {None: amount}, priority, factor, preempts)
    return tree, grants, ask


def _checks_pass(tree: algebra.Tree, grants: list[algebra.Grant], ask: algebra.Ask, taken: dict[int, int]) -> bool:
    """The ledger: every limit on the request's chain holds what stays, with the request."""
    def held(department: int) -> Decimal:
        members = {ROOT: (LEFT, RIGHT)}.get(department, (department,))
        return sum((g.amounts[None] * (g.units - taken.get(g.allocation_id, 0)) / g.units
                    for g in grants if g.department_id in members), D(0))
    for department in (ask.department_id, ROOT):
        limit = tree.limits[(department, None)]
        if held(department) + ask.amounts[None] > (limit.limit * ask.factor).quantize(D("0.0001")):
            return False
    return True


def _units_within_guarantee(tree: algebra.Tree, grants: list[algebra.Grant], grant: algebra.Grant) -> int:
    """How many of the grant's units lie within its department's guarantee, ranked."""
    line, running = tree.limits[(grant.department_id, None)].guaranteed, D(0)
    for other in sorted((g for g in grants if g.department_id == grant.department_id), key=lambda g: (-g.priority, g.age)):
        before, running = running, running + other.amounts[None]
        if other.allocation_id == grant.allocation_id:
            per_unit = other.amounts[None] / other.units
            inside = max(min(line, running) - before, D(0))
            return min(int(inside / per_unit), other.units)  # whole units wholly inside the line
    return 0


@SETTINGS
@given(worlds())
def test_a_partial_plan_takes_exactly_the_units_that_must_go_and_never_a_guaranteed_one(
    world: tuple[algebra.Tree, list[algebra.Grant], algebra.Ask],
) -> None:
    tree, grants, ask = world
    plan = victims.plan(tree, grants, ask)
    if not plan.admitted:
        return
    by_id = {grant.allocation_id: grant for grant in grants}
    taken = {victim.allocation_id: victim.units for victim in plan.victims}
    assert _checks_pass(tree, grants, ask, taken)
    for victim in plan.victims:
        grant = by_id[victim.allocation_id]
        assert grant.takeable and 1 <= victim.units <= grant.units
        fewer = {**taken, victim.allocation_id: victim.units - 1}
        assert not _checks_pass(tree, grants, ask, fewer), f"#{victim.allocation_id} could keep one more unit"
        if grant.department_id != ask.department_id and victim.fact is not None and victim.fact.basis != "priority":
            assert victim.units <= grant.units - _units_within_guarantee(tree, grants, grant)

"""A view kept from one set of grants to the next (``View.kept``, as the policy twin keeps it) answers
every question of the victim choice as a view made afresh from the grants does: the facts of
``room_facts``, the plan's victims, and the sums and rankings behind them, after random grants
start, end, begin leaving and change department totals, with the earlier view's answers carried
over for the departments no change touched."""

from __future__ import annotations

import random
from collections import defaultdict
from decimal import Decimal

import pytest

from allocations.quotas import algebra, victims

ROOT, NLP, VISION, AUDIO, SPEECH = 1, 2, 3, 4, 5  # speech is a team of audio
DEPARTMENTS = (NLP, VISION, AUDIO, SPEECH)
MILLI = Decimal("0.001")


def _tree() -> algebra.Tree:
    limits: dict[tuple[int, algebra.Scope], algebra.Limit] = {(ROOT, None): algebra.Limit(ROOT, None, Decimal(40), Decimal(40))}
    for department, guaranteed, limit in ((NLP, 10, 20), (VISION, 12, 24), (AUDIO, 8, 16), (SPEECH, 3, 6)):
        limits[(department, None)] = algebra.Limit(department, None, Decimal(guaranteed), Decimal(limit))
    return algebra.Tree(parents={ROOT: None, NLP: ROOT, VISION: ROOT, AUDIO: ROOT, SPEECH: AUDIO}, limits=limits)


def _grant(rng: random.Random, gid: int) -> algebra.Grant:
    units = rng.randint(1, 4)
    per_unit = Decimal(rng.choice((250, 500, 1000, 2000))) * MILLI
    return algebra.Grant(gid, rng.choice(DEPARTMENTS), {None: per_unit * units}, priority=rng.choice((100, 1000, 2000)),
                         age=gid, units=units)


def _kept(tree: algebra.Tree, grants: dict[int, algebra.Grant], earlier: victims.View | None,
          changed: set[int]) -> victims.View:
    by_department: dict[int, list[algebra.Grant]] = {department: [] for department in DEPARTMENTS}
    totals: dict[tuple[int, algebra.Scope], Decimal] = defaultdict(lambda: Decimal(0))
    for grant in grants.values():
        by_department[grant.department_id].append(grant)
        totals[(grant.department_id, None)] += grant.amounts[None]
    return victims.View.kept(tree, dict(grants), by_department, totals, earlier=earlier, changed=changed)


def _asks() -> list[algebra.Ask]:
    return [algebra.Ask(department, {None: Decimal(amount)}, priority=priority, preempts_lower=priority == 2000)
            for department in DEPARTMENTS for amount in ("0.5", "3") for priority in (1000, 2000)]


def _answers(tree: algebra.Tree, grants: list[algebra.Grant], view: victims.View | None) -> list[object]:
    """Every answer a plan reads, through ``view`` (None: a view made afresh by each call)."""
    local = {grant.allocation_id for grant in grants}
    out: list[object] = []
    for ask in _asks():
        room = victims.room_facts(tree, grants, ask, local=local, view=view)
        plan = victims.plan(tree, grants, ask, capacity_fits=lambda cut: len(cut) >= 2, capacity_candidates=room,
                            view=view)
        out += [sorted(room.items()), plan.admitted, plan.victims, plan.checks]
    fresh = view or victims.View(tree, grants)
    out += [fresh.held(d, None) for d in (ROOT, *DEPARTMENTS)]
    out += [sorted(fresh.beyond(d, None, fresh.guarantee_line(d, None)).items()) for d in DEPARTMENTS]
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_kept_view_answers_as_a_fresh_one_after_every_change(seed: int) -> None:
    rng = random.Random(seed)
    tree = _tree()
    grants = {gid: _grant(rng, gid) for gid in range(1, 30)}
    view = _kept(tree, grants, None, set())
    _answers(tree, list(grants.values()), view)  # the earlier view has counted everything once
    for step in range(40):
        changed: set[int] = set()
        for _ in range(rng.randint(1, 3)):
            gid = rng.choice(list(grants))
            move = rng.random()
            if move < 0.3:
                changed.add(grants.pop(gid).department_id)
            elif move < 0.6:
                new = _grant(rng, 100 + step * 10 + len(changed))
                grants[new.allocation_id] = new
                changed.add(new.department_id)
            else:
                grant = grants[gid]
                leaving = rng.randint(0, grant.units - 1)
                grants[gid] = algebra.Grant(gid, grant.department_id, grant.amounts, grant.priority, grant.age,
                                            takeable=not leaving, units=grant.units, leaving=leaving)
                changed.add(grant.department_id)
        view = _kept(tree, grants, view, changed)
        listed = list(grants.values())

        assert _answers(tree, listed, view) == _answers(tree, listed, None), f"step {step}"

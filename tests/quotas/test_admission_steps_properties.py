"""Hypothesis property: admission over steps (``effective_tree.QuotaView.stepped``, cut at window
edges and at every grant's start and end) answers what a minute-by-minute check answers.

Random grants of one department (start and end on a few hours' grid of minutes, a few units each)
and a random request interval and size, under a department with a quota over a root with a quota:
the request is admitted without victims exactly when, at every minute of its interval, what holds
then plus the request fits both limits; and each quota's line (``binding_checks``) shows the most
held at one minute of the interval whenever a minute does not fit, and never more than that."""

from __future__ import annotations

import datetime
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocations.quotas import algebra, victims
from allocations.quotas import in_use as timed
from allocations.quotas.effective_tree import QuotaView, SteppedTree, binding_checks, unstepped

ROOT, TEAM, FLAVOR = 1, 2, 7
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
HORIZON = 240  # minutes
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def minute(value: int) -> datetime.datetime:
    return EPOCH + datetime.timedelta(minutes=value)


spans = st.tuples(st.integers(0, HORIZON - 1), st.integers(1, HORIZON)).map(lambda p: (p[0], p[0] + p[1]))
grants_st = st.lists(st.tuples(spans, st.integers(1, 5)), max_size=8)


def in_tree(tree: algebra.Tree, amounts: dict[algebra.Scope, Decimal], start: int, end: int) -> dict[algebra.Scope, Decimal]:
    return tree.timed(amounts, minute(start), minute(end)) if isinstance(tree, SteppedTree) else amounts


@SETTINGS
@given(grants_st, spans, st.integers(1, 6), st.integers(3, 12), st.integers(3, 14))
def test_admission_over_steps_equals_a_minute_by_minute_check(
    held: list[tuple[tuple[int, int], int]], request: tuple[int, int], size: int, team_limit: int, root_limit: int,
) -> None:
    start, end = request
    view = QuotaView(parents={ROOT: None, TEAM: ROOT}, rows=[
        (1, ROOT, FLAVOR, Decimal(0), Decimal(root_limit), None), (2, TEAM, FLAVOR, Decimal(0), Decimal(team_limit), None),
    ])
    meeting = [(span, units) for span, units in held if span[0] < end and span[1] > start]
    marks = [timed.Held(minute(a), minute(b), Decimal(units)) for (a, b), units in meeting]
    tree = view.stepped(minute(start), minute(end), marks) or view.tree(minute(start), minute(end))
    grants = [algebra.Grant(allocation_id=index + 1, department_id=TEAM, priority=1000, age=index + 1, takeable=False,
                            amounts=in_tree(tree, {FLAVOR: Decimal(units)}, a, b), units=units)
              for index, ((a, b), units) in enumerate(meeting)]
    ask = algebra.Ask(department_id=TEAM, amounts=in_tree(tree, {FLAVOR: Decimal(size)}, start, end), priority=1000)

    plan = victims.plan(tree, grants, ask)

    most = max(sum((units for (a, b), units in meeting if a <= moment < b), 0) for moment in range(start, end))
    assert plan.admitted == (most + size <= min(team_limit, root_limit))
    for check in binding_checks(list(plan.checks)):
        assert unstepped(check.scope)[0] == FLAVOR
        assert check.holds <= most
        if not check.fits:
            assert check.holds == most

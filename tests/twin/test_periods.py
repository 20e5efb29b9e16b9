"""A request weighed over its period (``twin.replay.periods``): the shortcuts that make it cheap
give the portal's answer, checked against the long way over random grants and periods."""

from __future__ import annotations

import random
from collections import defaultdict
from decimal import Decimal

import pytest

from allocations.quotas import algebra
from twin.policy import Department, Policy, PriorityClass, policy_with_rules
from twin.replay.periods import Periods, Spanned, Weighed
from twin.replay.rules import window_steps
from twin.replay.world import quota_tree

HOUR = 3600.0
INSTALLED = Decimal(16)
# two departments on 16 GPUs, each guaranteed 4 and limited to 12, and nlp's limit lowered by 8 for
# ten hours every night: the shrink and the root's limit both bind now and then
POLICY = Policy((Department("nlp", Decimal(4), Decimal(12)), Department("vision", Decimal(4), Decimal(12))),
                {"std": PriorityClass("std", 100, False, Decimal(1), 60.0)})
NIGHTLY_SHRINK = """
windows:
  - {department: nlp, kind: recurring, begins_at: 2026-03-02T18:00:00Z, rrule: FREQ=DAILY, duration_minutes: 600,
     limit_delta: -8}
"""


def _periods(windows: bool) -> tuple[Policy, Periods]:
    policy = policy_with_rules(POLICY, NIGHTLY_SHRINK) if windows else POLICY
    tree = quota_tree(policy, INSTALLED)
    edges = [step.at for step in window_steps(policy, 10 * 24 * HOUR)] if windows else []
    return policy, Periods(policy, tree, edges)


def _grants(draw: random.Random, departments: int, now: float, *, begun: bool) -> list[Spanned]:
    """Grants decided before ``now`` (with ``begun``; else some begin later) ending within a day."""
    found = []
    for gid in range(draw.randint(0, 12)):
        since = now - draw.uniform(0, 8 * HOUR) if begun or draw.random() < 0.7 else now + draw.uniform(0, 6 * HOUR)
        until = max(since, now) + draw.choice([0.5, 1, 2, 3, 7, 11, 20]) * HOUR
        amount = Decimal(draw.choice([1, 2, 4])) * Decimal(draw.choice(["1", "0.5", "0.1429", "0.25"]))
        grant = algebra.Grant(allocation_id=gid, department_id=draw.randint(1, departments), amounts={None: amount},
                              priority=draw.choice([100, 1000]), age=gid)
        found.append(Spanned(grant, since, until))
    return found


def _the_long_way(weighed: Weighed) -> tuple[dict[tuple[int, algebra.Scope], Decimal], bool]:
    """Every grant placed in every step it meets, and the request checked in every step."""
    totals: dict[tuple[int, algebra.Scope], Decimal] = defaultdict(Decimal)
    for grant in weighed.grants:
        for scope, amount in grant.amounts.items():
            totals[(grant.department_id, scope)] += amount
    fits = all(check.fits for check in algebra.checks_from_totals(weighed.tree, totals, weighed.ask))
    return dict(totals), fits


@pytest.mark.parametrize("windows", [False, True], ids=["quotas alone", "a nightly shrink"])
@pytest.mark.parametrize("begun", [True, False], ids=["every grant begun", "some booked ahead"])
def test_the_totals_and_the_quota_checks_are_those_of_every_step(windows: bool, begun: bool) -> None:
    policy, periods = _periods(windows)
    draw = random.Random(7)
    departments = len(policy.departments)
    compared = {True: 0, False: 0}
    for _ in range(300):
        now = draw.uniform(0, 5 * 24 * HOUR)
        end = now + draw.choice([1, 4, 10, 16, 30]) * HOUR
        picture = periods.picture(now, end, _grants(draw, departments, now, begun=begun))
        amount = Decimal(draw.randint(1, 8))
        ask = algebra.Ask(department_id=draw.randint(1, departments), amounts={None: amount}, priority=100)
        weighed = periods.asking(picture, ask, now, end)
        totals, fits = _the_long_way(weighed)
        assert weighed.totals == totals
        assert [str(amount) for _, amount in sorted(weighed.totals.items(), key=repr)] == [
            str(amount) for _, amount in sorted(totals.items(), key=repr)]  # written the same way too
        assert weighed.quota_fits() == fits
        compared[fits] += 1
    assert compared[True] > 20 and compared[False] > 20, compared  # both answers were compared

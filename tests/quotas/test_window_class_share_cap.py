"""A priority class's share that a window of that class writes is a hard cap (issue 31, defect 4):
"by day the preemptible class may hold at most 4" admits 4, whatever the class's oversubscription
factor (1.5 here). The factor still raises the department's limit for the class's grants, and the
share of a class when no window of the class sets it (it is then the department's limit)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db.models import Q

from allocations.models import AllocationState, Quota
from allocations.quotas import algebra, victims
from allocations.quotas.effective_tree import QuotaView
from kernel.clock import clock_now
from kernel.errors import QuotaExceeded
from tenants.access import department_parent_map
from tests.conftest import World
from tests.quotas.windowing import HOUR, approve, ask, granted, quota, window

pytestmark = pytest.mark.django_db


def _room(world: World, limit: str) -> None:
    """nlp's quotas at ``limit`` (A100 units and GPU-equivalents), acme's well above."""
    Quota.objects.filter(Q(flavor__isnull=True) | Q(flavor=world.a100), department=world.nlp).update(limit=Decimal(limit))
    Quota.objects.filter(department=world.acme).update(limit=Decimal(32))


def test_a_preemptible_day_share_of_4_refuses_the_fifth_unit_despite_its_factor(world: World) -> None:
    _room(world, "10")
    now = clock_now()
    day = window(world, quota(world, "nlp"), begins_at=now - HOUR, ends_at=now + 8 * HOUR, limit="4",
                 priority_class=world.preemptible)
    assert world.preemptible.oversubscription_factor == Decimal("1.5")
    first = granted(world, quantity=4, priority="preemptible", length=2 * HOUR)
    assert first.state == AllocationState.APPROVED

    with pytest.raises(QuotaExceeded) as refusal:
        approve(world, ask(world, quantity=1, priority="preemptible", length=2 * HOUR))

    details = refusal.value.details
    assert (details["priority_class"], details["limit"], details["effective_limit"], details["in_use"],
            details["limit_by"]) == ("gpu-preemptible", "4", "4", "4", day.pk)
    # Another class is not limited by the preemptible share.
    assert granted(world, quantity=4, length=2 * HOUR).state == AllocationState.APPROVED


def test_without_a_window_of_the_class_in_force_its_grants_still_oversubscribe_by_the_factor(world: World) -> None:
    _room(world, "4")
    now = clock_now()
    window(world, quota(world, "nlp"), begins_at=now - HOUR, rrule="FREQ=DAILY", timezone="UTC",
           duration_minutes=2 * 60, limit="2", priority_class=world.preemptible)
    later = now + 12 * HOUR  # between two occurrences: the share is the department's limit, times 1.5
    view = QuotaView.read(parents=department_parent_map())
    share = view.tree(later, later + 2 * HOUR).limits[(world.nlp.pk, algebra.class_scope(world.preemptible.pk, None))]
    assert (share.limit, share.cap) == (Decimal(4), None)

    night = approve(world, ask(world, quantity=6, priority="preemptible", start=later, length=2 * HOUR))

    assert night.state == AllocationState.SCHEDULED
    with pytest.raises(QuotaExceeded):
        approve(world, ask(world, quantity=1, priority="preemptible", start=later, length=2 * HOUR))


def test_over_an_interval_the_lowest_reading_keeps_the_cap_where_a_lower_department_limit_takes_the_factor(
    world: World,
) -> None:
    _room(world, "10")
    now = clock_now()
    window(world, quota(world, "nlp"), begins_at=now + HOUR, ends_at=now + 2 * HOUR, limit="4",
           priority_class=world.preemptible)
    window(world, quota(world, "nlp"), begins_at=now + 3 * HOUR, ends_at=now + 4 * HOUR, limit="3")
    view = QuotaView.read(parents=department_parent_map())

    tree = view.tree(now, now + 5 * HOUR)
    share = tree.limits[(world.nlp.pk, algebra.class_scope(world.preemptible.pk, None))]
    assert (share.limit, share.cap) == (Decimal(3), Decimal(4))
    ask_ = algebra.Ask(department_id=world.nlp.pk, amounts={share.scope: Decimal(0)}, priority=100,
                       factor=Decimal("1.5"))
    [check] = [c for c in algebra.checks_from_totals(tree, {}, ask_) if c.scope == share.scope]
    assert check.effective_limit == Decimal(4)  # min(3 × 1.5, 4): neither the cap nor the factor is lost


def test_the_algebra_raises_a_limit_by_the_factor_but_never_a_cap() -> None:
    scope = algebra.class_scope(7, None)
    tree = algebra.Tree(parents={1: None}, limits={
        (1, None): algebra.Limit(1, None, Decimal(0), Decimal(10)),
        (1, scope): algebra.Limit(1, scope, Decimal(0), Decimal(4), cap=Decimal(4)),
    })
    grants = [algebra.Grant(1, 1, {None: Decimal(4), scope: Decimal(4)}, priority=100, age=1)]
    ask_ = algebra.Ask(department_id=1, amounts={None: Decimal(1), scope: Decimal(1)}, priority=100,
                       factor=Decimal("1.5"))

    plan = victims.plan(tree, grants, ask_)

    assert not plan.admitted
    assert [(check.scope, check.limit, check.effective_limit) for check in plan.failing] == [
        (scope, Decimal(4), Decimal(4))
    ]

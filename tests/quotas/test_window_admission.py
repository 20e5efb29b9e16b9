"""Admission with effective quotas: a request must fit the lowest numbers its department's quota
windows leave over its whole interval, and a window of one priority class limits that class's
share of the department's quota (the class's holdings in the department's subtree)."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocations.admission.planning import admission_decide, quota_tree
from allocations.grants import changes
from allocations.models import Allocation, AllocationState, Quota
from allocations.quotas import algebra
from kernel.errors import QuotaExceeded
from kernel.times import minute_utc
from tests.conftest import World
from tests.quotas.windowing import DAY, HOUR, approve, ask, granted, quota, window

pytestmark = pytest.mark.django_db(transaction=True)

RUNNING = (AllocationState.APPROVED, AllocationState.PROVISIONING, AllocationState.ACTIVE)


def nlp_gpu_limit(world: World, limit: str) -> Quota:
    found = quota(world, "nlp")
    found.limit = Decimal(limit)
    found.save(update_fields=["limit"])
    return found


def test_a_request_crossing_a_shrink_is_refused_with_the_shrunk_numbers_and_one_ending_before_it_passes(
    world: World,
) -> None:
    now = timezone.now()
    shrink = window(world, quota(world, "nlp"), begins_at=now + 2 * DAY, ends_at=now + 3 * DAY, limit="4")
    crossing = ask(world, quantity=6, length=4 * DAY)

    with pytest.raises(QuotaExceeded) as refusal:
        approve(world, crossing)

    details = refusal.value.details
    assert (details["department"], details["flavor"], details["limit"], details["in_use"]) == ("nlp", None, "4", "0")
    assert details["limit_by"] == shrink.pk
    assert f"quota window #{shrink.pk}" in refusal.value.message
    crossing.refresh_from_db()
    assert crossing.state == AllocationState.PENDING

    before = approve(world, ask(world, quantity=6, length=DAY))  # ends before the shrink: the base 10 applies
    assert before.state == AllocationState.APPROVED


def test_a_raise_in_force_lets_in_what_the_base_refuses_but_not_past_its_end(world: World) -> None:
    nlp_gpu_limit(world, "4")
    assert "limit 4" in str(pytest.raises(QuotaExceeded, approve, world, ask(world, quantity=6)).value.message)
    now = timezone.now()
    festival = window(world, quota(world, "nlp"), begins_at=now - HOUR, ends_at=now + DAY, limit_delta="4")
    end = (now + DAY).isoformat()

    with pytest.raises(QuotaExceeded) as refusal:
        approve(world, ask(world, quantity=6, length=2 * DAY))  # fits the festival's 8, not the 4 after it
    details = refusal.value.details
    assert (details["limit"], details["in_use"], details["requested"]) == ("4", "0", "6")
    assert details["from"] == end and "limit_by" not in details  # the base, after it
    assert f"from {minute_utc(now + DAY).removesuffix(' UTC')} to " in refusal.value.message  # for people

    inside = approve(world, ask(world, quantity=6, length=12 * HOUR))
    assert inside.state == AllocationState.APPROVED
    assert quota_tree(start=now, end=now + HOUR).limits[(world.nlp.pk, None)].limit_by == festival.pk


def test_a_grant_admitted_under_a_raise_is_not_counted_nor_taken_after_the_raise_ends(world: World) -> None:
    nlp_gpu_limit(world, "4")
    now = timezone.now()
    window(world, quota(world, "nlp"), begins_at=now - HOUR, ends_at=now + DAY, limit_delta="4")
    inside = granted(world, quantity=6, length=12 * HOUR)

    across = approve(world, ask(world, quantity=2, length=2 * DAY))  # 6 + 2 in the festival, 2 after it

    inside.refresh_from_db()
    assert across.state == AllocationState.APPROVED and inside.state in RUNNING
    with pytest.raises(QuotaExceeded) as refusal:  # 6 + 2 + 1 > 8 in the festival: nothing is beyond a limit
        approve(world, ask(world, quantity=1, length=2 * DAY))
    assert (refusal.value.details["limit"], refusal.value.details["in_use"]) == ("8", "8")
    inside.refresh_from_db()
    assert inside.state in RUNNING


def test_the_tree_takes_the_lowest_numbers_over_the_interval_and_clamps_the_lending_limit(world: World) -> None:
    nlp = quota(world, "nlp")
    nlp.guaranteed, nlp.lending_limit = Decimal("4"), Decimal("2")
    nlp.save(update_fields=["guaranteed", "lending_limit"])
    now = timezone.now()
    cut = window(world, nlp, begins_at=now + HOUR, ends_at=now + 2 * HOUR, guaranteed="1", limit_delta="-3")

    base = quota_tree()
    over = quota_tree(start=now, end=now + 3 * HOUR)
    before = quota_tree(start=now, end=now + HOUR)

    key = (world.nlp.pk, None)
    assert (base.limits[key].guaranteed, base.limits[key].limit, base.limits[key].lending_limit) == (Decimal(4), Decimal(10), Decimal(2))
    assert (over.limits[key].guaranteed, over.limits[key].limit, over.limits[key].lending_limit) == (Decimal(1), Decimal(7), Decimal(1))
    assert over.limits[key].limit_by == cut.pk
    assert before.limits[key] == base.limits[key]


def test_a_class_share_limits_that_class_in_the_whole_subtree_and_not_the_others(world: World) -> None:
    now = timezone.now()
    day = window(world, quota(world, "nlp"), begins_at=now - HOUR, ends_at=now + 6 * HOUR, limit="2",
                 priority_class=world.preemptible)
    # The share a window of the class writes is a hard cap: the class's factor of 1.5 does not raise it.
    granted(world, quantity=2, project="speech_project", persona="speech_member", priority="preemptible",
            length=2 * HOUR)
    with pytest.raises(QuotaExceeded) as refusal:
        approve(world, ask(world, quantity=2, priority="preemptible", length=2 * HOUR))
    details = refusal.value.details
    assert (details["department"], details["priority_class"], details["limit"], details["effective_limit"],
            details["in_use"], details["limit_by"]) == ("nlp", "gpu-preemptible", "2", "2", "2", day.pk)
    assert "gpu-preemptible's share of GPU-equivalents" in refusal.value.message

    assert granted(world, quantity=5, length=2 * HOUR).state == AllocationState.APPROVED  # another class: not limited
    later = approve(world, ask(world, quantity=2, priority="preemptible", start=now + 7 * HOUR, length=2 * HOUR))
    assert later.state == AllocationState.SCHEDULED  # after the day window, the class has the department's quota


def _next(now: datetime.datetime, hour: int) -> datetime.datetime:
    moment = now.replace(hour=hour, minute=0, second=0, microsecond=0)
    return moment if moment > now + HOUR else moment + DAY


def test_a_training_class_limited_by_day_and_the_department_raised_by_night_by_recurring_windows(world: World) -> None:
    nlp_gpu_limit(world, "4")
    now = timezone.now()
    origin = (now - 3 * DAY).replace(minute=0, second=0, microsecond=0)
    window(world, quota(world, "nlp"), begins_at=origin.replace(hour=8), rrule="FREQ=DAILY", timezone="UTC",
           duration_minutes=12 * 60, limit="2", priority_class=world.preemptible)
    window(world, quota(world, "nlp"), begins_at=origin.replace(hour=20), rrule="FREQ=DAILY", timezone="UTC",
           duration_minutes=12 * 60, limit_delta="4")
    day, night = _next(now, 9), _next(now, 21)

    with pytest.raises(QuotaExceeded) as refusal:
        approve(world, ask(world, quantity=4, priority="preemptible", start=day, length=2 * HOUR))
    assert (refusal.value.details["priority_class"], refusal.value.details["limit"]) == ("gpu-preemptible", "2")
    with pytest.raises(QuotaExceeded) as refusal:
        approve(world, ask(world, quantity=6, start=day, length=2 * HOUR))
    assert (refusal.value.details.get("priority_class"), refusal.value.details["limit"]) == (None, "4")

    training = approve(world, ask(world, quantity=4, priority="preemptible", start=night, length=2 * HOUR))
    evaluation = approve(world, ask(world, quantity=4, start=night + DAY, length=2 * HOUR))
    assert (training.state, evaluation.state) == (AllocationState.SCHEDULED, AllocationState.SCHEDULED)
    with pytest.raises(QuotaExceeded) as refusal:  # a night and the next morning: the lowest numbers hold
        approve(world, ask(world, quantity=4, priority="preemptible", start=night + 2 * DAY, length=12 * HOUR))
    assert refusal.value.details["limit"] == "2"


def test_a_renewal_into_a_shrink_is_refused_with_the_shrunk_numbers(world: World) -> None:
    grant = granted(world, quantity=6, length=DAY)
    now = timezone.now()
    shrink = window(world, quota(world, "nlp"), begins_at=now + 2 * DAY, ends_at=now + 3 * DAY, limit="4")

    with pytest.raises(QuotaExceeded) as refusal:
        changes.allocation_renew(actor=world.users["nlp_member"], allocation_id=grant.pk, ends_at=now + 4 * DAY)
    assert refusal.value.details["limit"] == "4"
    assert changes.allocation_renew(
        actor=world.users["nlp_member"], allocation_id=grant.pk, ends_at=now + 2 * DAY - HOUR
    ).applied
    assert shrink.pk


def test_windows_cost_admission_one_query_however_many_there_are(world: World) -> None:
    def queries() -> int:
        allocation = Allocation.objects.select_related("project", "flavor", "priority_class").get(pk=pending.pk)
        with CaptureQueriesContext(connection) as captured:
            assert admission_decide(allocation=allocation, clusters=[world.cluster]).refusal is None
        return len(captured)

    pending = ask(world, quantity=1)
    now = timezone.now()
    window(world, quota(world, "nlp"), begins_at=now + 5 * DAY, ends_at=now + 6 * DAY, limit="4")
    queries()  # the cluster's placement state is read once, then kept (on PostgreSQL)
    one = queries()
    for department in ("nlp", "vision", "acme"):
        window(world, quota(world, department), begins_at=now - HOUR, ends_at=now + 2 * DAY, limit_delta="1")
        window(world, quota(world, department), begins_at=now - DAY, rrule="FREQ=DAILY", timezone="Europe/Berlin",
               duration_minutes=60, limit_delta="2", priority_class=world.preemptible)
    assert queries() == one


def test_the_algebra_orders_checks_flavors_then_gpu_equivalents_then_shares() -> None:
    scopes: list[algebra.Scope] = [algebra.class_scope(3, None), None, 7, algebra.class_scope(2, 7), 5]
    assert sorted(scopes, key=algebra.scope_key) == [5, 7, None, ("class", 2, 7), ("class", 3, None)]

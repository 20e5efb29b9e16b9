"""Admission counts what holds step by step over the request's interval, never grants that do not
overlap added up: vision (H100 limit 8) holds 6 H100 tomorrow and 5 the day after, never both. A
request across both days must fit the worse day; the preview's quota line shows that day's
figure; a reclaim across the days takes only grants that hold in the day that binds; and a
renewal whose added days meet both grants is accepted when the most held at once fits."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from django.utils import timezone

from allocations.admission.planning import admission_decide
from allocations.grants import services
from allocations.models import Allocation, AllocationState, PreemptionPolicy, PriorityClass
from kernel.clock import clock_set
from kernel.errors import QuotaExceeded
from tests.conftest import World, requires_postgres

pytestmark = [pytest.mark.django_db, requires_postgres()]
DAY = datetime.timedelta(days=1)


@pytest.fixture
def now() -> datetime.datetime:
    moment = timezone.now().replace(minute=0, second=0, microsecond=0)
    clock_set(moment)
    return moment


def asked(world: World, *, quantity: int, start: datetime.datetime, end: datetime.datetime,
          priority: PriorityClass | None = None) -> Allocation:
    return services.allocation_request(
        actor=world.users["vision_member"], project=world.seg, flavor=world.h100, quantity=quantity,
        priority_class=priority or world.standard, starts_at=start, ends_at=end, justification="over time",
    )


def approve(world: World, allocation: Allocation) -> Allocation:
    return services.allocation_approve(actor=world.users["vision_admin"], allocation_id=allocation.pk)


def two_turns(world: World, now: datetime.datetime, priority: PriorityClass | None = None) -> tuple[Allocation, Allocation]:
    """6 H100 tomorrow, 5 the day after (never both at once)."""
    first = approve(world, asked(world, quantity=6, start=now + DAY, end=now + 2 * DAY, priority=priority))
    second = approve(world, asked(world, quantity=5, start=now + 2 * DAY, end=now + 3 * DAY, priority=priority))
    assert first.state == second.state == AllocationState.SCHEDULED
    return first, second


def test_a_request_across_two_grants_that_never_overlap_is_admitted_when_its_worst_day_fits(
    world: World, now: datetime.datetime,
) -> None:
    first, second = two_turns(world, now)
    across = approve(world, asked(world, quantity=2, start=now + DAY, end=now + 3 * DAY))  # 6 + 2, then 5 + 2 of 8
    assert across.state == AllocationState.SCHEDULED
    for grant in (first, second):  # nothing was taken to make room that was never short
        grant.refresh_from_db()
        assert (grant.state, grant.reclaim_units) == (AllocationState.SCHEDULED, None)

    with pytest.raises(QuotaExceeded) as refusal:  # 6 + 2 + 1 > 8 tomorrow; 5 + 2 + 1 fits the day after
        approve(world, asked(world, quantity=1, start=now + DAY, end=now + 3 * DAY))
    details = refusal.value.details
    assert (details["department"], details["flavor"], details["in_use"], details["limit"]) == ("vision", "h100", "8", "8")
    assert (details["from"], details["until"]) == ((now + DAY).isoformat(), (now + 2 * DAY).isoformat())
    # the sentence writes the binding day as people read times; the details keep ISO for programs
    assert f"from {now + DAY:%Y-%m-%d %H:%M} to {now + 2 * DAY:%Y-%m-%d %H:%M} UTC;" in str(refusal.value)
    after = approve(world, asked(world, quantity=1, start=now + 2 * DAY, end=now + 3 * DAY))  # the day after alone
    assert after.state == AllocationState.SCHEDULED


def test_the_preview_quota_line_shows_the_binding_days_figure(world: World, now: datetime.datetime) -> None:
    two_turns(world, now)
    pending = asked(world, quantity=1, start=now + DAY, end=now + 3 * DAY)
    decision = admission_decide(allocation=pending, clusters=[world.cluster])
    assert decision.admitted
    h100 = [check for check in decision.checks if check["department"] == "vision" and check["flavor"] == "h100"]
    assert len(h100) == 1  # one line per quota, not one per day
    assert (h100[0]["in_use"], h100[0]["effective_limit"]) == ("6", "8")  # the tighter day, never 6 + 5
    assert (h100[0]["binding_from"], h100[0]["binding_until"]) == ((now + DAY).isoformat(), (now + 2 * DAY).isoformat())
    body = world.client("vision_admin").get(f"/api/v1/allocations/{pending.pk}/placement-preview/").json()
    line = next(c for c in body["quota_checks"] if c["department"] == "vision" and c["flavor"] == "h100")
    assert line["in_use"] == "6" and [s["in_use"] for s in line["segments"]] == ["6", "5"]
    equivalents = next(c for c in body["quota_checks"] if c["department"] == "vision" and c["flavor"] is None)
    assert equivalents["in_use"] == "6"


def test_a_reclaim_across_the_days_takes_only_a_grant_that_holds_in_the_binding_day(
    world: World, now: datetime.datetime,
) -> None:
    first, second = two_turns(world, now, priority=world.preemptible)
    production = PriorityClass.objects.create(name="gpu-production", value=100000, notice_minutes=60,
                                              preemption_policy=PreemptionPolicy.PREEMPT_LOWER_PRIORITY)
    urgent = asked(world, quantity=3, start=now + DAY, end=now + 3 * DAY, priority=production)

    decision = admission_decide(allocation=urgent, clusters=[world.cluster])

    assert decision.admitted, decision.refusal
    # 6 + 3 > 8 tomorrow: one unit of tomorrow's grant must go; 5 + 3 fits the day after, whose grant stays.
    assert [(victim.allocation_id, victim.units) for victim in decision.plan.victims] == [(first.pk, 1)]
    assert second.pk not in {victim.allocation_id for victim in decision.plan.victims}


def test_a_renewal_whose_added_days_meet_two_grants_that_never_meet_is_accepted_when_the_peak_fits(
    world: World, now: datetime.datetime,
) -> None:
    two_turns(world, now)  # acme (GPU-equivalents 16): vision's 6, then 5
    running = services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=8,
        priority_class=world.standard, starts_at=now, ends_at=now + DAY, justification="renewed over both days",
    )
    running = services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=running.pk)
    assert world.a100.gpu_equivalents == Decimal(1)

    response = world.client("nlp_member").post(  # 8 + 6, then 8 + 5 of acme's 16 (never 8 + 11)
        f"/api/v1/allocations/{running.pk}/renew/", {"ends_at": (now + 3 * DAY).isoformat(), "justification": "more"},
        format="json",
    )

    assert response.status_code == 200, response.content
    running.refresh_from_db()
    assert running.ends_at == now + 3 * DAY

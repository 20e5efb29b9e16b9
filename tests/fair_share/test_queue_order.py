"""One order for waiting requests (``allocations.fair_share.queue``): the approvals queue lists them
in it (in SQL), the why answer counts the requests ahead in it, and both agree with the pure key
the policy twin's pass sorts by, on PostgreSQL where the SQL order is the one that ships."""

from __future__ import annotations

import datetime
import random
from decimal import Decimal

import pytest
from django.utils import timezone

from allocations.fair_share.queue import NO_FACTOR, factor_of, queue_key
from allocations.fair_share.reads import fair_share_factors, pending_in_queue_order
from allocations.models import Allocation, AllocationState, PriorityClass
from allocations.models.fair_share import FairShare
from frontend.selectors import pending_for_decision
from tests.conftest import World
from tests.why.test_reasons import ask, why

pytestmark = pytest.mark.django_db


def _production() -> PriorityClass:
    return PriorityClass.objects.create(name="gpu-production", value=100000, oversubscription_factor=Decimal(1))


def _python_order(factors: dict[int, float]) -> list[int]:
    rows = Allocation.objects.filter(state=AllocationState.PENDING).values_list(
        "pk", "created_at", "priority_class__value", "project__department_id")
    return [pk for pk, *_ in sorted(rows, key=lambda row: queue_key(
        priority=row[2], factor=factor_of(factors, row[3]), submitted=row[1], tiebreak=row[0]))]


@pytest.mark.parametrize("seed", range(4))
def test_the_sql_order_is_the_pure_key_with_ties_in_every_field(world: World, seed: int) -> None:
    """Random priorities, departments, factors (some equal, one department without any) and
    submission times (some equal): the SQL order is the order of ``queue_key``."""
    rng = random.Random(seed)
    classes = [world.standard, world.preemptible, _production()]
    asks = [("nlp_member", "llm"), ("speech_member", "speech_project"), ("vision_member", "seg")]
    flavors = {"llm": world.a100, "speech_project": world.a100, "seg": world.h100}
    made = []
    for _ in range(18):
        persona, project = rng.choice(asks)
        made.append(ask(world, flavor=flavors[project], persona=persona, project=project, priority=rng.choice(classes)))
    base = timezone.now()
    for allocation in made:  # a few distinct instants, so that many requests share one
        Allocation.objects.filter(pk=allocation.pk).update(created_at=base + datetime.timedelta(seconds=rng.randrange(4)))
    departments = [world.nlp.pk, world.speech.pk, world.vision.pk]
    factors = {department: rng.choice([0.25, 0.5, 1.0]) for department in departments[: rng.randrange(1, 4)]}

    shipped = list(pending_in_queue_order(Allocation.objects.filter(state=AllocationState.PENDING), factors=factors)
                   .values_list("pk", flat=True))
    assert shipped == _python_order(factors)


def test_a_higher_priority_comes_first_whatever_its_departments_fair_share(world: World) -> None:
    """nlp is far over its share and vision under it: vision's standard request comes before nlp's,
    but nlp's production request, the newest, comes before both."""
    now = timezone.now()
    FairShare.objects.create(department=world.nlp, usage=50.0, as_of=now)
    FairShare.objects.create(department=world.vision, usage=1.0, as_of=now)
    nlp_standard = ask(world, flavor=world.a100)
    vision_standard = ask(world, flavor=world.h100, persona="vision_member", project="seg")
    nlp_production = ask(world, flavor=world.a100, priority=_production())
    factors = fair_share_factors(now=now)
    assert factors[world.nlp.pk] < factors[world.vision.pk]

    queue = list(pending_for_decision(user=world.users["platform"], factors=factors).values_list("pk", flat=True))
    assert queue == [nlp_production.pk, vision_standard.pk, nlp_standard.pk]


def test_the_why_answers_position_is_the_rows_place_in_its_deciders_approvals_queue(world: World) -> None:
    """nlp's admin decides requests of nlp and its speech team: for each of them, the why answer's
    position is where the approvals queue nlp's admin sees lists it (a vision request never counts)."""
    now = timezone.now()
    FairShare.objects.create(department=world.nlp, usage=30.0, as_of=now)
    FairShare.objects.create(department=world.speech, usage=1.0, as_of=now)
    production = _production()
    made = [
        ask(world, flavor=world.a100),
        ask(world, flavor=world.a100, persona="speech_member", project="speech_project"),
        ask(world, flavor=world.h100, persona="vision_member", project="seg", priority=production),
        ask(world, flavor=world.a100, priority=production),
        ask(world, flavor=world.a100, persona="speech_member", project="speech_project", priority=world.preemptible),
    ]
    factors = fair_share_factors(now=timezone.now())
    queue = list(pending_for_decision(user=world.users["nlp_admin"], factors=factors).values_list("pk", flat=True))
    assert queue == [made[3].pk, made[1].pk, made[0].pk, made[4].pk]
    for place, pk in enumerate(queue, start=1):
        answer = why(world, Allocation.objects.get(pk=pk), persona="nlp_admin")
        assert answer.queue == {"position": place, "of": 4, "ahead": place - 1}, pk


def test_a_department_without_a_factor_stands_as_the_least_served() -> None:
    assert factor_of({1: 0.5}, 2) == NO_FACTOR == 1.0
    assert queue_key(priority=10, factor=0.1, submitted=5.0, tiebreak=9) < queue_key(
        priority=1, factor=1.0, submitted=0.0, tiebreak=0)

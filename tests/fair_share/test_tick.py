"""The decay tick (``allocations.fair_share.services.fair_share_tick``) on the database: what it
counts as held, exact halving at the half-life, ticks that compose, ticks that come twice or late,
and racing ticks on PostgreSQL."""

from __future__ import annotations

import datetime
from collections.abc import Callable

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from allocations.fair_share.reads import fair_share_table
from allocations.fair_share.services import fair_share_tick
from allocations.fair_share.tree import held_decayed
from allocations.models import Reservation
from allocations.models.fair_share import FairShare
from audit.models import AuditEvent
from tests.conftest import World, requires_postgres
from tests.telemetry.usage_history import HOUR, aligned_now, grant
from tests.threads import all_at_once

T = datetime.timedelta(hours=168)  # the default half-life
MINUTE = datetime.timedelta(minutes=1)
POSTGRES: pytest.MarkDecorator = requires_postgres()


def usages() -> dict[int, tuple[float, datetime.datetime | None]]:
    return {row.department_id: (row.usage, row.as_of) for row in FairShare.objects.all()}


def held(weight: float, *, began: datetime.datetime, ended: datetime.datetime, now: datetime.datetime) -> float:
    return held_decayed(weight, began_s_ago=(now - began).total_seconds(), ended_s_ago=(now - ended).total_seconds(),
                        half_life_s=T.total_seconds())  # fmt: skip


@pytest.mark.django_db
def test_an_hour_held_one_half_life_ago_then_halves_exactly_one_half_life_later(world: World) -> None:
    now = aligned_now()
    grant(world, since=now - T - HOUR, until=now - T)  # one A100 (1 GPU-equivalent) for one hour
    events = AuditEvent.objects.count()

    outcome = fair_share_tick(now=now)

    nlp = FairShare.objects.get(department=world.nlp)
    assert nlp.usage == pytest.approx(held(1.0, began=now - T - HOUR, ended=now - T, now=now), rel=1e-12)
    assert 0.5 * 0.5 ** (1 / 168) < nlp.usage < 0.5  # an hour, every moment of it a half-life old or older
    assert nlp.as_of == now
    assert outcome.departments == 4 and outcome.intervals == 1
    assert {d: u for d, (u, _) in usages().items() if d != world.nlp.pk} == {
        world.acme.pk: 0.0, world.speech.pk: 0.0, world.vision.pk: 0.0,
    }  # every department has its row now, the others with nothing held
    assert AuditEvent.objects.count() == events  # derived data: not audited

    fair_share_tick(now=now + T)

    assert FairShare.objects.get(department=world.nlp).usage == nlp.usage * 0.5  # exactly


@pytest.mark.django_db
def test_ticks_compose_into_one_and_weigh_units_by_their_gpu_equivalents(world: World) -> None:
    now = aligned_now()
    grant(world, since=now - 3 * HOUR)  # one A100, still held
    grant(world, since=now - 2 * HOUR, until=now - 30 * MINUTE, flavor="mig", quantity=3, project="speech_project")
    grant(world, since=now - 5 * HOUR, until=now - 4 * HOUR, flavor="h100", quantity=2, project="seg")

    for at in (now - 150 * MINUTE, now - 65 * MINUTE, now - 7 * MINUTE, now):
        fair_share_tick(now=at)
    stepwise = usages()
    FairShare.objects.all().delete()
    fair_share_tick(now=now)
    at_once = usages()

    assert stepwise.keys() == at_once.keys()
    for department_id, (usage, as_of) in at_once.items():
        assert stepwise[department_id][0] == pytest.approx(usage, rel=1e-12)
        assert as_of == stepwise[department_id][1] == now
    assert at_once[world.nlp.pk][0] == pytest.approx(held(1.0, began=now - 3 * HOUR, ended=now, now=now), rel=1e-12)
    speech = held(3 * 0.1429, began=now - 2 * HOUR, ended=now - 30 * MINUTE, now=now)
    assert at_once[world.speech.pk][0] == pytest.approx(speech, rel=1e-12)
    assert at_once[world.vision.pk][0] == pytest.approx(held(2.0, began=now - 5 * HOUR, ended=now - 4 * HOUR, now=now),
                                                        rel=1e-12)  # fmt: skip
    assert at_once[world.acme.pk][0] == 0.0  # a parent's row is its own projects', not its subtree's


@pytest.mark.django_db
def test_a_unit_moved_by_defragmentation_counts_once_and_a_released_one_stops(world: World) -> None:
    now = aligned_now()
    moved = grant(world, since=now - 3 * HOUR, until=now)
    old = moved.reservations.get()
    Reservation.objects.filter(pk=old.pk).update(released_at=now - 2 * HOUR + 30 * MINUTE)
    new = Reservation.objects.create(allocation=moved, unit=0, node=old.node, gpu_indices=[7], gpu_milli=1000)
    Reservation.objects.filter(pk=new.pk).update(created_at=now - 2 * HOUR + 20 * MINUTE)
    two = grant(world, since=now - 3 * HOUR, until=now, quantity=2, project="seg")
    Reservation.objects.filter(allocation=two, unit=1).update(released_at=now - HOUR)

    fair_share_tick(now=now)

    found = usages()
    assert found[world.nlp.pk][0] == pytest.approx(held(1.0, began=now - 3 * HOUR, ended=now, now=now), rel=1e-12)
    vision = held(1.0, began=now - 3 * HOUR, ended=now, now=now) + held(1.0, began=now - 3 * HOUR, ended=now - HOUR,
                                                                        now=now)  # fmt: skip
    assert found[world.vision.pk][0] == pytest.approx(vision, rel=1e-12)


@pytest.mark.django_db
def test_a_tick_that_comes_twice_or_late_changes_nothing(world: World) -> None:
    now = aligned_now()
    grant(world, since=now - 2 * HOUR)
    fair_share_tick(now=now)
    after = usages()

    assert fair_share_tick(now=now).departments == 0
    assert fair_share_tick(now=now - 10 * MINUTE).departments == 0  # older than the last tick: ignored
    assert usages() == after


@pytest.mark.django_db
def test_a_first_tick_counts_ten_half_lives_back_and_a_later_department_starts_there_too(world: World) -> None:
    now = aligned_now()
    grant(world, since=now - 11 * T, until=now - 9 * T)  # half of it more than ten half-lives ago
    fair_share_tick(now=now)
    assert FairShare.objects.get(department=world.nlp).usage == pytest.approx(
        held(1.0, began=now - 10 * T, ended=now - 9 * T, now=now), rel=1e-12
    )
    FairShare.objects.filter(department=world.vision).delete()  # as if vision had come after the first tick
    grant(world, since=now - 3 * HOUR, until=now - 2 * HOUR, project="seg")
    fair_share_tick(now=now + HOUR)
    assert FairShare.objects.get(department=world.vision).usage == pytest.approx(
        held(1.0, began=now - 3 * HOUR, ended=now - 2 * HOUR, now=now + HOUR), rel=1e-12
    )


@pytest.mark.django_db
def test_the_table_decays_to_the_moment_it_is_read(world: World) -> None:
    now = aligned_now()
    grant(world, since=now - 2 * HOUR, until=now - HOUR)
    fair_share_tick(now=now)
    usage = FairShare.objects.get(department=world.nlp).usage
    rows = {(row.department_id, row.own_projects): row for row in fair_share_table(now=now + T).rows}
    assert rows[(world.nlp.pk, True)].usage == usage * 0.5
    assert rows[(world.acme.pk, False)].usage == pytest.approx(usage * 0.5)  # a parent's row: its whole subtree


@pytest.mark.django_db
def test_the_demo_seed_shows_usage_and_running_it_again_changes_no_shares() -> None:
    """``seed_demo`` runs the tick once: ``make run`` opens the fair-share page with usage."""
    call_command("seed_demo")
    table = fair_share_table(now=timezone.now())
    assert table.as_of is not None
    ranked = {row.slug: row for row in table.rows if row.rank is not None}
    assert ranked["vision"].shares == 2 and ranked["vision"].usage > 0 and ranked["nlp"].usage > 0
    assert len({row.rank for row in ranked.values()}) > 1  # the week's grants rank the departments
    events = AuditEvent.objects.filter(action="fair_share.shares_set").count()
    call_command("seed_demo")
    assert AuditEvent.objects.filter(action="fair_share.shares_set").count() == events == 1


@POSTGRES
@pytest.mark.django_db(transaction=True)
def test_racing_ticks_give_what_one_tick_gives(world: World) -> None:
    now = aligned_now()
    grant(world, since=now - 4 * HOUR, quantity=2)
    grant(world, since=now - 3 * HOUR, until=now - HOUR, project="seg")

    outcomes = all_at_once([lambda: str(fair_share_tick(now=now).departments) for _ in range(4)])
    raced = usages()
    FairShare.objects.all().delete()
    fair_share_tick(now=now)

    assert sorted(outcomes.elements()) == ["0", "0", "0", "4"]  # one counted; the others found it done
    assert raced == usages()
    assert connection.vendor == "postgresql"


@POSTGRES
@pytest.mark.django_db(transaction=True)
def test_racing_ticks_at_different_moments_count_every_moment_once(world: World) -> None:
    now = aligned_now()
    grant(world, since=now - 4 * HOUR, quantity=2)

    def tick_at(at: datetime.datetime) -> Callable[[], str]:
        return lambda: str(fair_share_tick(now=at).departments)

    outcomes = all_at_once([tick_at(now - 20 * MINUTE), tick_at(now - 10 * MINUTE), tick_at(now)])
    assert not any(outcome.startswith("error") for outcome in outcomes) and "4" in outcomes
    fair_share_tick(now=now)  # whichever order they ran in, this brings everyone to now
    nlp = FairShare.objects.get(department=world.nlp)
    assert nlp.as_of == now
    assert nlp.usage == pytest.approx(held(2.0, began=now - 4 * HOUR, ended=now, now=now), rel=1e-12)

"""The usage roll-up (``accounting.rolling``): GPU-equivalent-hours granted from the grants exactly,
measured and used from the utilisation rows that count, only ended hours, the same rows when rolled
again, late data counted when it comes; two rolls at once on PostgreSQL leave one roll's rows."""

from __future__ import annotations

import datetime
import threading
from decimal import Decimal

import pytest
from django.db import connection

from accounting.models import UsageHour
from accounting.rolling import usage_hours_roll, usage_hours_roll_recent
from allocations.models import Reservation
from telemetry.models import UsageSource
from tests.conftest import World, requires_postgres
from tests.telemetry.usage_history import HOUR, aligned_now, fill, grant, usage

MINUTE = datetime.timedelta(minutes=1)
ZERO = Decimal(0)
POSTGRES: pytest.MarkDecorator = requires_postgres()


def hours_of(allocation_id: int) -> dict[datetime.datetime, tuple[Decimal, Decimal, Decimal]]:
    return {
        row.hour: (row.granted, row.measured, row.used)
        for row in UsageHour.objects.filter(allocation_id=allocation_id).order_by("hour")
    }


@pytest.mark.django_db
def test_granted_hours_come_from_the_units_live_inside_the_period_cut_at_hour_edges(world: World) -> None:
    now = aligned_now()
    two = grant(world, since=now - 5 * HOUR + 20 * MINUTE, quantity=2, until=now - HOUR + 40 * MINUTE)
    Reservation.objects.filter(allocation=two, unit=1).update(released_at=now - 3 * HOUR + 30 * MINUTE)
    mig = grant(world, since=now - 2 * HOUR, flavor="mig", quantity=3)

    outcome = usage_hours_roll(start=now - 6 * HOUR, end=now + 3 * HOUR, now=now + 10 * MINUTE)

    assert outcome.end == now and outcome.hours == 6  # the hour under way is not rolled
    assert hours_of(two.pk) == {
        now - 5 * HOUR: (Decimal("1.333333"), ZERO, ZERO),  # 2 units × 40 minutes
        now - 4 * HOUR: (Decimal("2.000000"), ZERO, ZERO),
        now - 3 * HOUR: (Decimal("1.500000"), ZERO, ZERO),  # unit 1 released half-way
        now - 2 * HOUR: (Decimal("1.000000"), ZERO, ZERO),
        now - HOUR: (Decimal("0.666667"), ZERO, ZERO),  # the period ends 40 minutes in
    }
    assert hours_of(mig.pk) == {now - 2 * HOUR: (Decimal("0.428700"), ZERO, ZERO), now - HOUR: (Decimal("0.428700"), ZERO, ZERO)}
    row = UsageHour.objects.get(allocation=two, hour=now - HOUR)
    assert (row.department_id, row.project_id, row.flavor_id, row.cluster_id) == (
        world.nlp.pk, world.llm.pk, world.a100.pk, world.cluster.pk
    )


@pytest.mark.django_db
def test_a_unit_moved_by_defragmentation_counts_once(world: World) -> None:
    now = aligned_now()
    moved = grant(world, since=now - 3 * HOUR)
    old = moved.reservations.get()
    Reservation.objects.filter(pk=old.pk).update(released_at=now - 2 * HOUR + 30 * MINUTE)
    new = Reservation.objects.create(allocation=moved, unit=0, node=old.node, gpu_indices=[7], gpu_milli=1000)
    Reservation.objects.filter(pk=new.pk).update(created_at=now - 2 * HOUR + 20 * MINUTE)

    usage_hours_roll(start=now - 3 * HOUR, end=now, now=now)

    assert [granted for granted, _, _ in hours_of(moved.pk).values()] == [Decimal("1.000000")] * 3


@pytest.mark.django_db
def test_measured_and_used_come_from_the_rows_that_count_and_unknown_is_never_idle(world: World) -> None:
    now = aligned_now()
    held = grant(world, since=now - 2 * HOUR, quantity=2)
    fill(held, start=now - 2 * HOUR, end=now - 2 * HOUR + 30 * MINUTE, activity=0.5)  # half an hour known
    fill(held, start=now - 2 * HOUR + 30 * MINUTE, end=now - HOUR, activity=None)  # then unknown
    fill(held, start=now - 2 * HOUR, end=now - HOUR, activity=0.9, source=UsageSource.AGENT)  # beaten by dcgm
    fill(held, start=now - HOUR, end=now, activity=0.25, source=UsageSource.AGENT)  # the agent alone

    usage_hours_roll(start=now - 2 * HOUR, end=now, now=now)

    first, second = hours_of(held.pk).values()
    # The known dcgm rows beat the agent's; where dcgm is unknown the agent's known row counts.
    assert first == (Decimal("2.000000"), Decimal("2.000000"), Decimal("0.5") * 2 * Decimal("0.5") + Decimal("0.9") * 2 * Decimal("0.5"))
    assert second == (Decimal("2.000000"), Decimal("2.000000"), Decimal("0.500000"))


@pytest.mark.django_db
def test_an_hour_without_readings_has_no_measured_part_and_coverage_follows(world: World) -> None:
    now = aligned_now()
    held = grant(world, since=now - HOUR)
    fill(held, start=now - HOUR, end=now - HOUR + 15 * MINUTE, activity=1.0)

    usage_hours_roll(start=now - HOUR, end=now, now=now)

    assert hours_of(held.pk) == {now - HOUR: (Decimal("1.000000"), Decimal("0.250000"), Decimal("0.250000"))}


@pytest.mark.django_db
def test_rolling_again_gives_the_same_rows_and_late_data_is_counted_when_it_comes(world: World) -> None:
    now = aligned_now()
    held = grant(world, since=now - 3 * HOUR)
    fill(held, start=now - 3 * HOUR, end=now - HOUR, activity=0.5)
    usage_hours_roll(start=now - 3 * HOUR, end=now, now=now)
    before = hours_of(held.pk)
    usage_hours_roll(start=now - 3 * HOUR, end=now, now=now)
    assert hours_of(held.pk) == before and UsageHour.objects.count() == 3

    fill(held, start=now - HOUR, end=now, activity=1.0)  # the last hour's rows arrive late
    usage_hours_roll_recent(now=now + 5 * MINUTE)

    after = hours_of(held.pk)
    assert after[now - HOUR] == (Decimal("1.000000"), Decimal("1.000000"), Decimal("1.000000"))
    assert after[now - 3 * HOUR] == before[now - 3 * HOUR]


@POSTGRES
@pytest.mark.django_db(transaction=True)
def test_two_rolls_of_the_same_hours_at_once_leave_one_rolls_rows(world: World) -> None:
    now = aligned_now()
    held = grant(world, since=now - 6 * HOUR, quantity=2)
    fill(held, start=now - 6 * HOUR, end=now, activity=0.5)
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def roll() -> None:
        try:
            barrier.wait()
            usage_hours_roll(start=now - 6 * HOUR, end=now, now=now)
        except BaseException as error:  # noqa: BLE001 (reported below)
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=roll) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert UsageHour.objects.count() == 6
    assert set(hours_of(held.pk).values()) == {(Decimal("2.000000"), Decimal("2.000000"), Decimal("1.000000"))}
    assert usage(held, at=now, activity=0.5).pk  # the hour under way stays out until it ends
    usage_hours_roll(start=now - 6 * HOUR, end=now + HOUR, now=now + 30 * MINUTE)
    assert UsageHour.objects.count() == 6

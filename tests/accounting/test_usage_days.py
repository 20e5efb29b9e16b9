"""``UsageDay``: the roll keeps each UTC day equal to the sum of its hours, and the usage API reads
whole days from it and the edge hours from ``UsageHour`` with exactly the sums the hours give, for
any range (partial days, midnight, month edges); the migration sums the hours already rolled."""

from __future__ import annotations

import datetime
import importlib
from collections import defaultdict
from decimal import Decimal

import pytest
from django.apps import apps
from django.db.models import Sum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounting.models import UsageDay, UsageHour
from accounting.rolling import usage_hours_roll
from accounting.selectors import usage_report
from tests.conftest import World
from tests.telemetry.usage_history import HOUR, aligned_now, fill, grant

DAYS = 3


def days_equal_their_hours() -> None:
    hours: dict[tuple[object, ...], Decimal] = defaultdict(Decimal)
    for row in UsageHour.objects.all():
        day = row.hour.replace(hour=0)
        hours[(day, row.department_id, row.project_id, row.flavor_id, row.cluster_id, "g")] += row.granted
        hours[(day, row.department_id, row.project_id, row.flavor_id, row.cluster_id, "u")] += row.used
    days: dict[tuple[object, ...], Decimal] = {}
    for summed in UsageDay.objects.all():
        where = (summed.day, summed.department_id, summed.project_id, summed.flavor_id, summed.cluster_id)
        days[(*where, "g")] = summed.granted
        days[(*where, "u")] = summed.used
    assert days == dict(hours)


def reference(start: datetime.datetime, end: datetime.datetime, granularity: str, group_by: str) -> dict[tuple[object, ...], tuple[Decimal, Decimal, Decimal]]:
    """The report's rows summed straight from the hours, in Python."""
    found: dict[tuple[object, ...], list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 3)
    for row in UsageHour.objects.filter(hour__gte=start, hour__lt=end):
        period = row.hour.replace(hour=0) if granularity == "day" else row.hour.replace(day=1, hour=0)
        key = None if group_by == "none" else getattr(row, f"{group_by}_id")
        sums = found[(period, key)]
        sums[0] += row.granted
        sums[1] += row.measured
        sums[2] += row.used
    return {key: (sums[0], sums[1], sums[2]) for key, sums in found.items()}


@pytest.fixture
def history(world: World) -> datetime.datetime:
    """Three days of two departments' grants, read half of the time, rolled."""
    now = aligned_now()
    since = now - DAYS * 24 * HOUR - 5 * HOUR
    nlp = grant(world, since=since, quantity=2)
    seg = grant(world, since=since + 7 * HOUR, project="seg", flavor="h100")
    mig = grant(world, since=since + 30 * HOUR, flavor="mig", quantity=3)
    fill(nlp, start=since, end=now, activity=0.3)
    fill(seg, start=since + 20 * HOUR, end=now - 10 * HOUR, activity=0.8)
    fill(mig, start=since + 40 * HOUR, end=now, activity=0.05)
    usage_hours_roll(start=since, end=now, now=now)
    return now


@pytest.mark.django_db
def test_each_day_is_the_sum_of_its_hours_after_rolls_and_re_rolls(world: World, history: datetime.datetime) -> None:
    days_equal_their_hours()
    late = grant(world, since=history - 50 * HOUR)
    fill(late, start=history - 50 * HOUR, end=history - 20 * HOUR, activity=0.9)
    usage_hours_roll(start=history - 30 * HOUR, end=history, now=history)  # the middle of a day onwards
    days_equal_their_hours()
    assert UsageDay.objects.filter(project=world.llm).aggregate(total=Sum("granted"))["total"] == (
        UsageHour.objects.filter(project=world.llm).aggregate(total=Sum("granted"))["total"]
    )


@pytest.mark.django_db
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    first=st.integers(min_value=0, max_value=DAYS * 24 + 4), length=st.integers(min_value=1, max_value=DAYS * 24 + 5),
    granularity=st.sampled_from(["day", "month"]), group_by=st.sampled_from(["department", "project", "flavor", "none"]),
)
def test_the_report_by_day_or_month_is_exactly_the_sum_of_the_hours(
    world: World, history: datetime.datetime, first: int, length: int, granularity: str, group_by: str
) -> None:
    base = history - (DAYS * 24 + 5) * HOUR
    start, end = base + first * HOUR, base + (first + length) * HOUR
    report = usage_report(user=world.users["platform"], start=start, end=end, granularity=granularity, group_by=group_by)
    got = {(row.period, row.key): (row.totals.granted, row.totals.measured, row.totals.used) for row in report.rows}
    assert got == reference(start, end, granularity, group_by)
    assert [row.period for row in report.rows] == sorted(row.period for row in report.rows)


@pytest.mark.django_db
def test_the_migration_sums_the_hours_already_rolled_into_days(world: World, history: datetime.datetime) -> None:
    expected = sorted(UsageDay.objects.values_list("day", "project_id", "flavor_id", "granted", "measured", "used"))
    UsageDay.objects.all().delete()
    migration = importlib.import_module("accounting.migrations.0004_usage_days")
    migration.days_from_hours(apps, None)
    assert sorted(UsageDay.objects.values_list("day", "project_id", "flavor_id", "granted", "measured", "used")) == expected


@pytest.mark.parametrize(("summed", "exact"), [
    (Decimal("178.7184000000001"), Decimal("178.718400")),  # SQLite's float sum of six-place values
    (161.43139999999997, Decimal("161.431400")),
    (Decimal("67.071570"), Decimal("67.071570")),  # PostgreSQL's: unchanged
    (None, Decimal("0.000000")),  # nothing summed
])
def test_a_sum_of_usage_columns_keeps_their_six_places(summed: Decimal | float | None, exact: Decimal) -> None:
    from accounting.hours import hours_summed

    assert hours_summed(summed) == exact and hours_summed(summed).as_tuple().exponent == -6

"""The utilisation reads: allocated from the grants (exact, without usage rows), used from the rows
that count, unknown kept apart from idle, summed in SQL into hour and day buckets, scoped to what
the reader may see, in a fixed number of queries. Run on SQLite and PostgreSQL (make test)."""

from __future__ import annotations

import datetime
from collections import Counter
from typing import Any

import pytest
from django.http import Http404
from django.utils import timezone

from allocations.models import Allocation, Reservation
from clusters.models import Node
from telemetry.gpu_busy import gpu_busy_overlay
from telemetry.models import NodeReportState, ObservedGpu, UsageSource
from telemetry.utilisation_reads import (
    RANGES,
    UtilisationSeries,
    allocation_activity,
    cluster_utilisation,
    range_window,
)
from tests.conftest import World
from tests.telemetry.usage_history import FIVE, HOUR, aligned_now, fill, grant, usage

pytestmark = pytest.mark.django_db


def bucket_at(series: UtilisationSeries, moment: datetime.datetime) -> Any:
    return next(bucket for bucket in series.buckets if bucket.start <= moment < bucket.end)


def test_allocated_comes_from_the_grants_exactly_without_any_usage_row(world: World) -> None:
    now = aligned_now()
    since = now - 3 * HOUR + datetime.timedelta(minutes=2)  # two minutes into a 5-minute bucket
    two = grant(world, since=since, quantity=2)
    released = now - 90 * datetime.timedelta(minutes=1)
    Reservation.objects.filter(pk=two.reservations.get(unit=1).pk).update(released_at=released)

    day = cluster_utilisation(user=world.users["platform"], cluster_id=world.cluster.pk, range_name="day", now=now)
    total = day.total
    assert len(total.buckets) == 288 and total.buckets[-1].end == now
    assert bucket_at(total, since - FIVE).allocated == 0
    assert bucket_at(total, since).allocated == pytest.approx(2 * 3 / 5)  # 3 of the bucket's 5 minutes
    assert bucket_at(total, since + FIVE).allocated == pytest.approx(2)
    assert bucket_at(total, released - FIVE).allocated == pytest.approx(2)
    assert bucket_at(total, released).allocated == pytest.approx(1)
    # Nothing measured: unknown, never idle.
    held = bucket_at(total, released)
    assert held.measured_used is None and held.unknown == pytest.approx(1) and held.known == 0
    assert total.ratio is None and total.coverage == 0
    assert total.allocated_gpu_hours == pytest.approx(2 * (3 * 60 - 2 - 90) / 60 + 90 / 60)


def test_a_unit_moved_by_defragmentation_counts_once_and_a_later_start_counts_from_it(world: World) -> None:
    now = aligned_now()
    moved = grant(world, since=now - 4 * HOUR)
    old = moved.reservations.get()
    # The move: the new row is booked at 10:20 (say), the old one released at 10:30; both are unit 0.
    moved_at = now - 2 * HOUR + datetime.timedelta(minutes=30)
    Reservation.objects.filter(pk=old.pk).update(released_at=moved_at)
    new = Reservation.objects.create(allocation=moved, unit=0, node=old.node, gpu_indices=[7], gpu_milli=1000)
    Reservation.objects.filter(pk=new.pk).update(created_at=moved_at - datetime.timedelta(minutes=10))
    later = grant(world, since=now - 4 * HOUR, project="seg", flavor="h100")
    Allocation.objects.filter(pk=later.pk).update(starts_at=now - HOUR)  # booked at approval, its period later

    week = cluster_utilisation(user=world.users["platform"], cluster_id=world.cluster.pk, range_name="week", now=now)
    hours = {bucket.start: bucket.allocated for bucket in week.total.buckets}
    assert hours[now - 3 * HOUR] == pytest.approx(1)
    assert hours[now - 2 * HOUR] == pytest.approx(1)  # the move's hour: the unit once
    assert hours[now - HOUR] == pytest.approx(2)  # the later grant from its start
    assert {series.key for series in week.departments} == {"nlp", "vision"}
    assert bucket_at(week.departments[1], now - 2 * HOUR).allocated == 0


def test_the_row_that_counts_is_a_known_one_then_dcgm_then_hami_then_the_agent(world: World) -> None:
    now = aligned_now()
    allocation = grant(world, since=now - HOUR, quantity=2)
    t = [now - HOUR + i * FIVE for i in range(4)]
    usage(allocation, at=t[0], activity=0.5, source=UsageSource.DCGM)
    usage(allocation, at=t[0], activity=0.9, source=UsageSource.AGENT)
    usage(allocation, at=t[1], activity=None, source=UsageSource.DCGM)
    usage(allocation, at=t[1], activity=0.4, source=UsageSource.AGENT)
    usage(allocation, at=t[2], activity=0.7, source=UsageSource.HAMI)
    usage(allocation, at=t[2], activity=0.2, source=UsageSource.AGENT)
    usage(allocation, at=t[3], activity=None, source=UsageSource.DCGM)

    day = cluster_utilisation(user=world.users["platform"], cluster_id=world.cluster.pk, range_name="day", now=now)
    used = [bucket_at(day.total, at).measured_used for at in t]
    assert used == [pytest.approx(1.0), pytest.approx(0.8), pytest.approx(1.4), None]
    assert bucket_at(day.total, t[3]).unknown == pytest.approx(2)
    assert day.total.ratio == pytest.approx((1.0 + 0.8 + 1.4) / 6)
    assert day.total.coverage == pytest.approx(3 / 12)


def test_week_and_month_sum_the_5_minute_rows_into_hours_and_days(world: World) -> None:
    now = aligned_now()
    allocation = grant(world, since=now - 3 * HOUR, quantity=4)
    hour = now - 2 * HOUR
    fill(allocation, start=hour, end=hour + HOUR / 2, activity=0.75)  # the first half known: 3 of 4 busy
    fill(allocation, start=hour + HOUR / 2, end=hour + HOUR, activity=None)  # the second half unknown

    week = cluster_utilisation(user=world.users["platform"], cluster_id=world.cluster.pk, range_name="week", now=now)
    bucket = bucket_at(week.total, hour)
    assert (bucket.start, bucket.end) == (hour, hour + HOUR)
    assert (bucket.allocated, bucket.known, bucket.used) == (pytest.approx(4), pytest.approx(2), pytest.approx(1.5))
    assert bucket.unknown == pytest.approx(2) and bucket.measured_used == pytest.approx(1.5)
    assert week.total.ratio == pytest.approx(0.75)

    month = cluster_utilisation(user=world.users["platform"], cluster_id=world.cluster.pk, range_name="month", now=now)
    day = bucket_at(month.total, hour)
    assert (day.start.hour, day.start.minute) == (0, 0) and day.end == min(now, day.start + datetime.timedelta(days=1))
    held = (min(now, day.end) - max(now - 3 * HOUR, day.start)).total_seconds()
    assert day.used == pytest.approx(1.5 * 3600 / day.seconds)  # the hour's 1.5 over the day's length
    assert day.allocated == pytest.approx(4 * held / day.seconds)
    assert month.total.ratio == pytest.approx(0.75)
    start, end = range_window(RANGES["month"], now=now)
    assert end == now and (end - start) >= datetime.timedelta(days=30) and start.hour == 0


@pytest.mark.parametrize(
    ("persona", "keys", "whole"),
    [
        ("platform", {"nlp", "nlp-speech", "vision"}, True),
        ("auditor", {"nlp", "nlp-speech", "vision"}, True),  # an auditor of the root reads every department
        ("nlp_admin", {"nlp", "nlp-speech"}, False),
        ("nlp_member", {"nlp", "nlp-speech"}, False),
        ("speech_member", {"nlp-speech"}, False),
        ("vision_member", {"vision"}, False),
    ],
)
def test_each_reader_sees_the_departments_they_read_and_their_total(
    world: World, persona: str, keys: set[str], whole: bool
) -> None:
    now = aligned_now()
    for project, flavor, activity in (("llm", "a100", 0.5), ("seg", "h100", 1.0), ("speech_project", "a100", 0.0)):
        allocation = grant(world, since=now - 2 * HOUR, project=project, flavor=flavor)
        fill(allocation, start=now - 2 * HOUR, end=now, activity=activity)

    found = cluster_utilisation(user=world.users[persona], cluster_id=world.cluster.pk, range_name="day", now=now)
    assert {series.key for series in found.departments} == keys and found.whole_cluster is whole
    busy = {"nlp": 0.5, "vision": 1.0, "nlp-speech": 0.0}
    assert found.total.used_gpu_hours == pytest.approx(2 * sum(busy[key] for key in keys))
    assert found.total.allocated_gpu_hours == pytest.approx(2 * len(keys))


def test_someone_without_a_role_gets_404(world: World) -> None:
    with pytest.raises(Http404):
        cluster_utilisation(user=world.users["nobody"], cluster_id=world.cluster.pk)
    with pytest.raises(Http404):
        gpu_busy_overlay(user=world.users["nobody"], cluster_id=world.cluster.pk)


def test_a_chart_takes_the_same_few_queries_however_much_there_is(world: World, django_assert_max_num_queries: Any) -> None:
    now = aligned_now()
    first = grant(world, since=now - 2 * HOUR)
    fill(first, start=now - 2 * HOUR, end=now, activity=0.5)
    for persona in ("platform", "nlp_member"):
        with django_assert_max_num_queries(7):
            cluster_utilisation(user=world.users[persona], cluster_id=world.cluster.pk, range_name="week", now=now)
    for index in range(6):
        more = grant(world, since=now - 20 * HOUR, project="seg" if index % 2 else "llm",
                     flavor="h100" if index % 2 else "mig", quantity=2)  # fmt: skip
        fill(more, start=now - 20 * HOUR, end=now, activity=0.25 * (index % 4))
    for persona in ("platform", "nlp_member"):
        with django_assert_max_num_queries(7):
            found = cluster_utilisation(user=world.users[persona], cluster_id=world.cluster.pk, range_name="week",
                                        now=now)  # fmt: skip
        assert found.total.ratio is not None


def test_an_allocations_last_day_has_gaps_where_unknown_and_its_newest_memory(world: World) -> None:
    now = aligned_now()
    allocation = grant(world, since=now - 3 * HOUR)
    usage(allocation, at=now - 3 * FIVE, activity=0.2, memory_used=10 * 2**30, memory_granted=80 * 2**30)
    usage(allocation, at=now - 2 * FIVE, activity=None)
    usage(allocation, at=now - FIVE, activity=0.6, memory_used=20 * 2**30, memory_granted=80 * 2**30)
    usage(allocation, at=now - FIVE, activity=0.9, source=UsageSource.AGENT)

    found = allocation_activity(user=world.users["nlp_member"], allocation=allocation, now=now + datetime.timedelta(minutes=2))
    assert len(found.points) == 288 and found.end == now
    assert [value for _at, value in found.points[-4:]] == [None, 0.2, None, 0.6]
    assert found.mean_activity == pytest.approx(0.4)
    assert (found.memory_used_bytes, found.memory_granted_bytes, found.memory_at) == (20 * 2**30, 80 * 2**30, now)
    assert found.memory_ratio == pytest.approx(0.25)
    with pytest.raises(Http404):
        allocation_activity(user=world.users["vision_member"], allocation=allocation)


def test_the_gpu_overlay_reads_the_agent_while_fresh_else_the_holders_newest_bucket(world: World) -> None:
    now = timezone.now()
    bucket = now.replace(minute=now.minute - now.minute % 5, second=0, microsecond=0) - FIVE
    whole = grant(world, since=now - HOUR, quantity=2)  # two A100s
    slices = grant(world, since=now - HOUR, flavor="mig", quantity=2)  # two 1g instances (1/7 each)
    usage(whole, at=bucket, activity=0.5)
    usage(slices, at=bucket, activity=0.7)
    whole_gpus = [(row.node.name, int(row.gpu_indices[0])) for row in whole.reservations.select_related("node")]
    mig_gpus = Counter((row.node.name, int(row.gpu_indices[0])) for row in slices.reservations.select_related("node"))
    node = Node.objects.get(cluster=world.cluster, name=whole_gpus[0][0])
    gpu = node.gpus.get(index=whole_gpus[0][1])
    NodeReportState.objects.create(node=node, stale_at=now + datetime.timedelta(minutes=1))
    ObservedGpu.objects.create(node=node, uuid="GPU-1", gpu=gpu, index=gpu.index, first_seen_at=now, last_seen_at=now,
                               gpu_percent=93)  # fmt: skip

    overlay = gpu_busy_overlay(user=world.users["platform"], cluster_id=world.cluster.pk, now=now)
    assert (overlay[whole_gpus[0]].ratio, overlay[whole_gpus[0]].source, overlay[whole_gpus[0]].level) == (0.93, "agent", "high")
    assert (overlay[whole_gpus[1]].percent, overlay[whole_gpus[1]].source) == (50, "allocations")
    for key, instances in mig_gpus.items():  # activity × compute share of each instance
        assert overlay[key].ratio == pytest.approx(0.7 * instances / 7)
    # Stale agent reports and old buckets: unknown.
    later = now + datetime.timedelta(minutes=20)
    stale = gpu_busy_overlay(user=world.users["platform"], cluster_id=world.cluster.pk, now=later)
    assert all(busy.ratio is None and busy.label == "busy: unknown" for busy in stale.values())
    with pytest.raises(Http404):
        gpu_busy_overlay(user=world.users["nlp_admin"], cluster_id=world.cluster.pk)

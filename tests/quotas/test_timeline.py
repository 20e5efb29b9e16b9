"""The clock moves grants: quota window edges, expiry, then reclaims whose notice ran out, then
scheduled starts — by beat's timeline task, or by the serving process's clock on the embedded default."""

from __future__ import annotations

import datetime
import os
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, AllocationState
from allocations.tasks import allocations_timeline_task
from clusters.models import ClusterPush
from gpuportal import clock
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)


def _scheduled(world: World, *, starts_in: datetime.timedelta) -> Allocation:
    start = timezone.now() + starts_in
    allocation = services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=2,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1),
        justification="next week's run",
    )
    return services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)


def test_a_grant_starting_later_is_scheduled_and_pushes_nothing_until_its_start(world: World) -> None:
    granted = _scheduled(world, starts_in=datetime.timedelta(minutes=10))
    assert granted.state == AllocationState.SCHEDULED
    assert granted.reservations.filter(released_at__isnull=True).count() == 2  # it holds its booking
    assert not ClusterPush.objects.filter(project=world.llm).exists()

    assert allocations_timeline_task.apply().get() == {"window_edges": 0, "expired": 0, "reclaimed": 0, "started": 0}

    Allocation.objects.filter(pk=granted.pk).update(starts_at=timezone.now() - datetime.timedelta(seconds=1))
    assert allocations_timeline_task.apply().get()["started"] == 1
    granted.refresh_from_db()
    assert granted.state in (AllocationState.APPROVED, AllocationState.PROVISIONING, AllocationState.ACTIVE)
    assert ClusterPush.objects.filter(project=world.llm, allocation=granted).exists()


def test_the_in_process_clock_ticks_the_timeline(world: World) -> None:
    granted = _scheduled(world, starts_in=datetime.timedelta(minutes=10))
    Allocation.objects.filter(pk=granted.pk).update(starts_at=timezone.now() - datetime.timedelta(seconds=1))
    assert clock.Clock(interval=3600).tick() == {"window_edges": 0, "expired": 0, "reclaimed": 0, "started": 1}


def test_a_failing_tick_is_logged_and_the_clock_goes_on(monkeypatch: Any, caplog: Any) -> None:
    def broken(**_: Any) -> int:
        raise RuntimeError("database went away")

    monkeypatch.setattr("allocations.tasks.allocations_expire", broken)
    assert clock.Clock(interval=3600).tick() == {}
    assert "timeline tick failed" in caplog.text


def test_the_clock_runs_only_without_a_broker(monkeypatch: Any) -> None:
    from celery import current_app

    started: list[clock.Clock] = []

    def start(self: clock.Clock) -> clock.Clock:
        started.append(self)
        return self

    monkeypatch.setattr(clock.Clock, "start", start)
    monkeypatch.setattr(clock.Clock, "running", property(lambda self: True))
    monkeypatch.setattr(clock, "_clock", None)
    eager = current_app.conf.task_always_eager
    try:
        current_app.conf.task_always_eager = False
        assert clock.clock_start() is None  # a broker: beat runs the timeline
        current_app.conf.task_always_eager = True
        first = clock.clock_start()
        assert first is not None and clock.clock_start() is first
    finally:
        current_app.conf.task_always_eager = eager
    assert started == [first] and first.interval == clock.TICK_SECONDS


def test_beat_runs_the_timeline_at_least_every_minute() -> None:
    entry: dict[str, Any] = settings.CELERY_BEAT_SCHEDULE["allocations-timeline"]
    assert entry["task"] == "allocations.tasks.allocations_timeline_task" and float(entry["schedule"]) <= 60


def test_the_serving_process_has_the_timeline_task_its_clock_runs() -> None:
    """The web process does not import the apps' task modules as a worker does: the clock must
    bring the task with it (``make run`` once logged NotRegistered every tick)."""
    import subprocess
    import sys

    code = (
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'gpuportal.settings'); django.setup(); "
        "from celery import current_app; import gpuportal.clock as clock; "
        "print(clock.TIMELINE_TASK in current_app.tasks)"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "GPUPORTAL_DEBUG": "true"}, check=True)
    assert found.stdout.strip().splitlines()[-1] == "True", found.stderr

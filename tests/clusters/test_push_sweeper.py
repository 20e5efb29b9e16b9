"""In-process tasks have no beat: the sweeper of the serving process delivers a push whose lease ran
out, or whose worker gave it back after an unexpected error, without anyone asking for a sync."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
from celery import current_app
from django.utils import timezone

from allocations.grants import services as allocation_services
from allocations.models import Allocation, AllocationState
from clusters import outbox
from clusters.models import ClusterPush, PushState
from delivery import outbox as delivery_outbox
from tests.conftest import World, requires_postgres

pytestmark = [requires_postgres(), pytest.mark.django_db(transaction=True)]


def approve(world: World) -> Allocation:
    start = timezone.now()
    allocation = allocation_services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=1,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="x",
    )
    return allocation_services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)


def wait_for(condition: Any, *, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_a_push_whose_lease_ran_out_is_delivered_by_the_sweeper(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The process died mid-push: the row is claimed, its allocation provisioning, and nothing
    will dispatch it again but the sweeper once the lease has run out."""
    with monkeypatch.context() as undispatched:
        undispatched.setattr(outbox, "push_dispatch", lambda **_: True)
        allocation = approve(world)
    push = ClusterPush.objects.get(allocation=allocation)
    allocation_services.allocation_provision_start(allocation_id=allocation.pk)
    ClusterPush.objects.filter(pk=push.pk).update(attempts=1, claimed_until=timezone.now() - datetime.timedelta(seconds=1))
    assert current_app.conf.task_always_eager  # the embedded default: dispatching delivers in-process

    sweeper = outbox.PushSweeper(interval=0.1).start()
    try:
        assert wait_for(lambda: Allocation.objects.get(pk=allocation.pk).state == AllocationState.ACTIVE)
    finally:
        sweeper.stop(timeout=30)

    assert not sweeper.running
    assert set(ClusterPush.objects.values_list("state", flat=True)) == {PushState.DONE}
    push.refresh_from_db()
    assert push.attempts == 2


def test_a_push_left_claimed_but_not_expired_waits_for_its_lease(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as undispatched:
        undispatched.setattr(outbox, "push_dispatch", lambda **_: True)
        allocation = approve(world)
    ClusterPush.objects.filter(allocation=allocation).update(
        attempts=1, claimed_until=timezone.now() + datetime.timedelta(minutes=5)
    )

    assert outbox.PushSweeper().sweep() == 1  # only the cluster-wide push was due

    assert ClusterPush.objects.get(allocation=allocation).state == PushState.PENDING
    assert Allocation.objects.get(pk=allocation.pk).state == AllocationState.APPROVED


def test_a_worker_that_fails_unexpectedly_gives_its_lease_back_for_the_next_sweep(
    world: World, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.GPUPORTAL_PUSH_BACKOFF_BASE_SECONDS = 0  # due again at once (else after the backoff)

    def broken(**_: Any) -> None:
        raise RuntimeError("the database went away mid-push")

    with monkeypatch.context() as failing:
        failing.setattr(delivery_outbox, "cluster_sync_project", broken)
        allocation = approve(world)  # its push runs in-process on commit, and fails
    push = ClusterPush.objects.get(allocation=allocation)
    assert (push.state, push.attempts, push.claimed_until) == (PushState.PENDING, 1, None)
    assert push.pk in outbox.pushes_due()

    outbox.PushSweeper().sweep()

    push.refresh_from_db()
    assert (push.state, push.attempts) == (PushState.DONE, 2)
    assert Allocation.objects.get(pk=allocation.pk).state == AllocationState.ACTIVE


def test_the_sweeper_starts_once_per_process_and_only_for_in_process_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[outbox.PushSweeper] = []

    def start(self: outbox.PushSweeper) -> outbox.PushSweeper:
        started.append(self)
        return self

    monkeypatch.setattr(outbox.PushSweeper, "start", start)
    monkeypatch.setattr(outbox.PushSweeper, "running", property(lambda self: True))
    monkeypatch.setattr(outbox, "_sweeper", None)

    eager = current_app.conf.task_always_eager
    try:
        current_app.conf.task_always_eager = False
        assert outbox.pushes_sweeper_start() is None  # a broker: beat dispatches
        current_app.conf.task_always_eager = True
        first = outbox.pushes_sweeper_start()
        assert first is not None and outbox.pushes_sweeper_start() is first
    finally:
        current_app.conf.task_always_eager = eager
    assert started == [first] and first.interval == outbox.SWEEP_SECONDS

"""Approvals racing the recording of pushes on one cluster, on real PostgreSQL connections from
real threads: nobody deadlocks, nobody gets an error, every allocation ends active (the global
lock order of ``kernel.locks``). And the retry of a transaction that PostgreSQL picked as a
deadlock's victim (``kernel.transactions.retry_on_deadlock``)."""

from __future__ import annotations

import datetime
import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.db import OperationalError, transaction
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, AllocationState, Flavor
from audit import actions
from audit.models import AuditEvent
from clusters import outbox
from clusters.models import ClusterPush, PushState
from delivery.outbox import push_deliver
from kernel.transactions import DEADLOCK_SQLSTATES, retry_on_deadlock
from tenants.models import Project
from tests.conftest import World, build_world, requires_postgres
from tests.threads import all_at_once

pytestmark = [requires_postgres(), pytest.mark.django_db(transaction=True)]


def _request(world: World, *, project: Project, flavor: Flavor, persona: str) -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users[persona], project=project, flavor=flavor, quantity=1, priority_class=world.standard,
        starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="race",
    )


def _project(world: World, *, slug: str, department: Any, member: str) -> Project:
    project = Project.objects.create(slug=slug, name=slug, department=department)
    project.members.add(world.users[member])
    return project


def test_approvals_racing_push_recordings_on_one_cluster_never_deadlock(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Before the lock order, a push marking an older approved allocation of its project active
    held the audit chain lock while it waited for a key-share lock on the cluster row, which an
    approval held FOR UPDATE while it waited for the audit chain lock: PostgreSQL killed one of them.
    The order alone must prevent it: no transaction had to run again."""
    world = build_world(a100_gpus=16, h100_gpus=8)
    groups = [
        _project(world, slug=f"push-{index}", department=world.nlp if index % 2 else world.vision,
                 member="nlp_member" if index % 2 else "vision_member")
        for index in range(4)
    ]
    with monkeypatch.context() as undispatched:  # the pushes of the setup wait in the outbox
        undispatched.setattr(outbox, "push_dispatch", lambda **_: True)
        for project in groups:  # two approved allocations each: the newer push covers the older
            flavor, persona, admin = (
                (world.a100, "nlp_member", "nlp_admin") if project.department_id == world.nlp.pk
                else (world.h100, "vision_member", "vision_admin")
            )
            for _ in range(2):
                allocation = _request(world, project=project, flavor=flavor, persona=persona)
                services.allocation_approve(actor=world.users[admin], allocation_id=allocation.pk)
    pending = [
        (_request(world, project=world.llm, flavor=world.a100, persona="nlp_member"), "nlp_admin")
        for _ in range(4)
    ] + [
        (_request(world, project=world.seg, flavor=world.h100, persona="vision_member"), "vision_admin")
        for _ in range(4)
    ]
    newest = [ClusterPush.objects.filter(project=project).latest("pk").pk for project in groups]

    def approval(allocation_id: int, persona: str) -> Callable[[], str]:
        def job() -> str:
            services.allocation_approve(actor=world.users[persona], allocation_id=allocation_id)
            return "approved"
        return job

    def push(push_id: int) -> Callable[[], str]:
        def job() -> str:
            push_deliver(push_id=push_id)
            return "pushed"
        return job

    caplog.set_level(logging.WARNING, logger="kernel.transactions")
    outcomes = all_at_once(
        [approval(allocation.pk, persona) for allocation, persona in pending] + [push(pk) for pk in newest]
    )

    assert outcomes == Counter({"approved": 8, "pushed": 4})
    states = Counter(Allocation.objects.values_list("state", flat=True))
    assert states == Counter({AllocationState.ACTIVE: 16})
    assert not ClusterPush.objects.filter(state=PushState.PENDING).exists()
    assert [record.getMessage() for record in caplog.records if record.name == "kernel.transactions"] == []


def test_releases_racing_approvals_on_one_cluster_never_deadlock(caplog: pytest.LogCaptureFixture) -> None:
    """A release writes outbox rows that refer to the cluster. PostgreSQL checks such a foreign key
    at COMMIT, with a key-share lock on the cluster row: after the audit chain lock, unless
    ``audit_record`` runs the checks first, and an approval holding the cluster FOR UPDATE while it
    waits for the chain lock deadlocked with it."""
    world = build_world(a100_gpus=16, h100_gpus=8)
    granted = []
    for project, flavor, persona, admin in (
        (world.llm, world.a100, "nlp_member", "nlp_admin"), (world.seg, world.h100, "vision_member", "vision_admin"),
    ):
        for _ in range(4):
            allocation = _request(world, project=project, flavor=flavor, persona=persona)
            services.allocation_approve(actor=world.users[admin], allocation_id=allocation.pk)
            granted.append((allocation.pk, persona))
    pending = [
        (_request(world, project=world.speech_project, flavor=world.a100, persona="speech_member").pk, "nlp_admin")
        for _ in range(4)
    ] + [(_request(world, project=world.seg, flavor=world.h100, persona="vision_member").pk, "vision_admin") for _ in range(4)]

    def decision(allocation_id: int, persona: str, *, release: bool) -> Callable[[], str]:
        def job() -> str:
            if release:
                services.allocation_release(actor=world.users[persona], allocation_id=allocation_id)
                return "released"
            services.allocation_approve(actor=world.users[persona], allocation_id=allocation_id)
            return "approved"
        return job

    caplog.set_level(logging.WARNING, logger="kernel.transactions")
    outcomes = all_at_once(
        [decision(pk, persona, release=True) for pk, persona in granted]
        + [decision(pk, persona, release=False) for pk, persona in pending]
    )

    assert outcomes == Counter({"released": 8, "approved": 8})
    states = Counter(Allocation.objects.values_list("state", flat=True))
    assert states == Counter({AllocationState.RELEASED: 8, AllocationState.ACTIVE: 8})
    assert [record.getMessage() for record in caplog.records if record.name == "kernel.transactions"] == []


def test_a_push_covering_an_older_approved_allocation_records_both_of_its_events(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The older allocation passes through provisioning in one write of its row (kernel.locks: a
    second update in the transaction would check its foreign keys again), and both events are kept."""
    with monkeypatch.context() as undispatched:
        undispatched.setattr(outbox, "push_dispatch", lambda **_: True)
        older, newer = (
            services.allocation_approve(
                actor=world.users["nlp_admin"],
                allocation_id=_request(world, project=world.llm, flavor=world.a100, persona="nlp_member").pk,
            )
            for _ in range(2)
        )
    push_deliver(push_id=ClusterPush.objects.get(allocation=newer).pk)

    for allocation in (older, newer):
        events = AuditEvent.objects.filter(target_type="allocations.allocation", target_id=str(allocation.pk))
        assert list(events.order_by("seq").values_list("action", flat=True)) == [
            actions.ALLOCATION_REQUESTED.code, actions.ALLOCATION_APPROVED.code,
            actions.ALLOCATION_PROVISIONING.code, actions.ALLOCATION_ACTIVATED.code,
        ]
        provisioning = events.get(action=actions.ALLOCATION_PROVISIONING.code)
        assert (provisioning.before, provisioning.after) == ({"state": "approved"}, {"state": "provisioning"})
    assert set(ClusterPush.objects.filter(project=world.llm).values_list("state", flat=True)) == {PushState.DONE}


def test_a_transaction_chosen_as_a_deadlock_victim_is_run_again_and_succeeds(world: World) -> None:
    """Two transactions lock two rows in opposite orders: PostgreSQL aborts one of them with
    deadlock_detected; that one runs again from the start (after the other committed) and commits."""
    first, second = world.llm, world.seg
    both_hold_one = threading.Barrier(2, timeout=30)
    attempts: Counter[str] = Counter()

    def locking(name: str, order: tuple[Project, Project]) -> Callable[[], str]:
        @retry_on_deadlock(attempts=3)
        def job() -> str:
            attempts[name] += 1
            Project.objects.select_for_update().get(pk=order[0].pk)
            if attempts[name] == 1:
                both_hold_one.wait()  # each holds its first row: the second lock closes the cycle
            Project.objects.select_for_update().get(pk=order[1].pk)
            Project.objects.filter(pk=order[0].pk).update(name=name)
            return name
        return job

    outcomes = all_at_once([locking("forward", (first, second)), locking("backward", (second, first))])

    assert outcomes == Counter({"forward": 1, "backward": 1})
    assert sorted(attempts.values()) == [1, 2]  # the victim ran twice, the survivor once


def test_the_retry_runs_once_inside_an_outer_transaction_and_leaves_other_errors_alone(world: World) -> None:
    calls: list[int] = []

    class Deadlock(Exception):
        sqlstate = next(iter(DEADLOCK_SQLSTATES))

    @retry_on_deadlock(attempts=3, base_delay=0)
    def deadlocked() -> None:
        calls.append(1)
        raise OperationalError("deadlock detected") from Deadlock()

    with pytest.raises(OperationalError), transaction.atomic():
        deadlocked()  # nested: the outermost block must retry (a savepoint cannot be replayed)
    assert len(calls) == 1

    calls.clear()
    with pytest.raises(OperationalError):
        deadlocked()
    assert len(calls) == 3  # outermost: retried, then the error is the caller's

    @retry_on_deadlock(attempts=3, base_delay=0)
    def broken() -> None:
        calls.append(1)
        raise OperationalError("connection lost")

    calls.clear()
    with pytest.raises(OperationalError):
        broken()
    assert len(calls) == 1

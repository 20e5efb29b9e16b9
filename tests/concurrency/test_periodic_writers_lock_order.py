"""The periodic writers of derived rows (the usage roll-up, the utilisation tick) against an
approval, on real PostgreSQL connections from real threads, in the interleaving that deadlocked
under load: the approval holds its department chain FOR UPDATE and is about to lock its cluster;
the writer's rows refer to that cluster and to a department of the chain.

PostgreSQL checks a foreign key with a KEY SHARE lock on the row it points to, and Django's keys
are checked at COMMIT, row after row: the writer took the cluster's KEY SHARE (for a grant of
another department), then waited for the department's, which the approval held; the approval
waited for the cluster, which the writer held. Now the writer takes those locks first, in the
order of ``kernel.locks`` (allocations, departments, projects, flavors, clusters), so it would wait
for the department before it holds the cluster; and the approval holds its chain FOR NO KEY
UPDATE, which a KEY SHARE lock never waits for, so the writer does not wait for it at all."""

from __future__ import annotations

import pytest

from accounting.models import UsageHour
from accounting.rolling import usage_hours_roll
from allocations.models import Allocation, AllocationState
from telemetry.models import AllocationUsage
from telemetry.usage.ticking import allocations_utilisation_tick
from tests.concurrency.approval_pause import approval_racing, pending_request
from tests.conftest import World, build_world, requires_postgres
from tests.telemetry.usage_history import HOUR, aligned_now, grant

pytestmark = [requires_postgres(), pytest.mark.django_db(transaction=True)]


def _world_with_two_grants() -> tuple[World, list[Allocation]]:
    """A grant of vision, then one of nlp (its rows come second), both held for two hours on the
    one cluster; and a pending request of nlp."""
    world = build_world()
    since = aligned_now() - 2 * HOUR
    held = [
        grant(world, since=since, flavor="h100", project="seg"),
        grant(world, since=since, flavor="a100", project="llm"),
    ]
    return world, held


def test_the_usage_roll_and_an_approval_never_deadlock(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    world, held = _world_with_two_grants()
    pending = pending_request(world, project=world.llm, flavor=world.a100, persona="nlp_member")
    now = aligned_now()

    outcomes, retried, waited = approval_racing(
        monkeypatch, caplog, world=world, allocation_id=pending.pk, admin="nlp_admin",
        writer=lambda: usage_hours_roll(start=now - 2 * HOUR, end=now, now=now),
    )  # fmt: skip

    assert not waited  # the chain is held FOR NO KEY UPDATE: the writer's KEY SHARE locks pass it
    assert outcomes == {"approved": 1, "written": 1}
    assert retried == []  # the order alone prevents it: no transaction ran twice
    assert Allocation.objects.get(pk=pending.pk).state != AllocationState.PENDING
    assert set(UsageHour.objects.values_list("allocation_id", flat=True)) == {grant.pk for grant in held}


def test_the_utilisation_tick_and_an_approval_never_deadlock(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    world, held = _world_with_two_grants()
    pending = pending_request(world, project=world.llm, flavor=world.a100, persona="nlp_member")

    outcomes, retried, waited = approval_racing(
        monkeypatch, caplog, world=world, allocation_id=pending.pk, admin="nlp_admin",
        writer=allocations_utilisation_tick,
    )  # fmt: skip

    assert not waited  # the chain is held FOR NO KEY UPDATE: the writer's KEY SHARE locks pass it
    assert outcomes == {"approved": 1, "written": 1}
    assert retried == []
    assert Allocation.objects.get(pk=pending.pk).state != AllocationState.PENDING
    assert set(AllocationUsage.objects.values_list("allocation_id", flat=True)) == {grant.pk for grant in held}

"""Approvals, releases, usage roll-ups and utilisation ticks all at once, on real PostgreSQL
connections from real threads: nothing deadlocks and no transaction runs twice (the load under
which the roll-up and the tick each deadlocked with an approval: before their locks were taken in
the global order, roll-ups and ticks died in every run of two or three such rounds with ``deadlock detected``)."""

from __future__ import annotations

import datetime
import logging
from collections import Counter
from collections.abc import Callable

import pytest

from accounting.rolling import usage_hours_roll
from allocations.catalogue.states import HOLDING_STATES
from allocations.grants import services
from allocations.models import Allocation
from telemetry.usage.ticking import allocations_utilisation_tick
from tests.concurrency.approval_pause import pending_request
from tests.conftest import World, build_world, requires_postgres
from tests.telemetry.usage_history import HOUR, aligned_now, grant
from tests.threads import all_at_once

pytestmark = [requires_postgres(), pytest.mark.django_db(transaction=True)]
ROUNDS = 2


def _decide(world: World, allocation: Allocation, *, release: bool) -> Callable[[], str]:
    admin = {world.llm.pk: "nlp_admin", world.seg.pk: "vision_admin"}[allocation.project_id]

    def job() -> str:
        if release:
            services.allocation_release(actor=world.users[admin], allocation_id=allocation.pk)
            return "released"
        services.allocation_approve(actor=world.users[admin], allocation_id=allocation.pk)
        return "approved"

    return job


def _roll(now: datetime.datetime) -> Callable[[], str]:
    def job() -> str:
        usage_hours_roll(start=now - 2 * HOUR, end=now, now=now)
        return "rolled"

    return job


def _tick() -> str:
    allocations_utilisation_tick()
    return "ticked"


def _round(world: World) -> Counter[str]:
    """Six grants held for two hours (three of vision, three of nlp) and six requests; then at once:
    the six approvals, releases of half of the grants, two roll-ups and two ticks. Everything is
    released afterwards, to leave room for the next round."""
    since = aligned_now() - 2 * HOUR
    held = [grant(world, since=since, flavor="h100", project="seg") for _ in range(3)]
    held += [grant(world, since=since, flavor="a100", project="llm") for _ in range(3)]
    pending = [pending_request(world, project=world.llm, flavor=world.a100, persona="nlp_member") for _ in range(3)]
    pending += [pending_request(world, project=world.seg, flavor=world.h100, persona="vision_member") for _ in range(3)]
    jobs = [_decide(world, row, release=False) for row in pending] + [_decide(world, row, release=True) for row in held[::2]]
    outcomes = all_at_once([*jobs, _roll(aligned_now()), _roll(aligned_now()), _tick, _tick])
    for allocation in Allocation.objects.filter(state__in=HOLDING_STATES):
        _decide(world, allocation, release=True)()
    return outcomes


def test_approvals_releases_rolls_and_ticks_at_once_never_deadlock(caplog: pytest.LogCaptureFixture) -> None:
    world = build_world(a100_gpus=32, h100_gpus=16)
    caplog.set_level(logging.WARNING, logger="kernel.transactions")
    outcomes: Counter[str] = Counter()
    for _ in range(ROUNDS):
        outcomes += _round(world)

    assert outcomes == Counter({"approved": 6 * ROUNDS, "released": 3 * ROUNDS, "rolled": 2 * ROUNDS, "ticked": 2 * ROUNDS})
    assert [record.getMessage() for record in caplog.records if record.name == "kernel.transactions"] == []

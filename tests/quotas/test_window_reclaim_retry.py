"""A shrink's reclaim is met even when its grants are locked at the edge (issue 31, defect 5), on
real PostgreSQL connections from real threads.

``nlp`` holds 4 single-A100 grants of a class reclaimed without notice when a window lowers its
limit to 2 (shrink policy ``reclaim``). Owners renewing or resizing their grants hold the grants'
row locks; the tick never waits for a grant while it holds the department chain (that is the
reverse of the global lock order, ``kernel.locks``), so it records the edge, with its reclaim
pending, and a later tick takes the grants once they are free: the edge applied once, its reclaim
audited once, each grant reclaimed once.
"""

from __future__ import annotations

import datetime
import threading
from collections import Counter
from collections.abc import Callable

import pytest
from django.db import connection, transaction
from django.db.models import Q

from allocations.grants import changes
from allocations.models import Allocation, AllocationState, PriorityClass, Quota
from allocations.models.windows import QuotaWindow, QuotaWindowEdge, ShrinkPolicy
from allocations.windows.tick import quota_windows_tick
from kernel.clock import clock_now
from kernel.errors import Conflict, QuotaExceeded
from tests.conftest import World, requires_postgres
from tests.quotas.windowing import DAY, HOUR, audit_head, audit_since, granted, held, quota, window
from tests.threads import all_at_once

pytestmark = [requires_postgres(), pytest.mark.django_db(transaction=True)]

NEW_LIMIT = 2
TICK = datetime.timedelta(seconds=30)


def shrinking(world: World) -> tuple[list[Allocation], QuotaWindow]:
    Quota.objects.filter(Q(flavor__isnull=True) | Q(flavor=world.a100), department=world.nlp).update(limit=20)
    Quota.objects.filter(department=world.acme).update(limit=32)
    PriorityClass.objects.filter(pk=world.preemptible.pk).update(preemptible=True)  # reclaimed at once
    grants = [granted(world, quantity=1, priority="preemptible") for _ in range(4)]
    now = clock_now()
    shrink = window(world, quota(world, "nlp"), begins_at=now, ends_at=now + 2 * DAY, limit=str(NEW_LIMIT),
                    shrink_policy=ShrinkPolicy.RECLAIM)
    return grants, shrink


def reclaimed_each_once(since: int) -> bool:
    counted = Counter(event.target_id for event in audit_since(since, "allocation.reclaiming"))
    return all(count == 1 for count in counted.values())


class Holder:
    """Owners in the middle of a change: a transaction on another connection that holds the
    grants' row locks until ``release``."""

    def __init__(self, ids: list[int]) -> None:
        self.ids, self.locked, self.done = ids, threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self) -> None:
        try:
            with transaction.atomic():
                list(Allocation.objects.select_for_update().filter(pk__in=sorted(self.ids)).order_by("pk"))
                self.locked.set()
                self.done.wait(timeout=60)
        finally:
            connection.close()

    def __enter__(self) -> Holder:
        self.thread.start()
        assert self.locked.wait(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=30)


def test_a_shrink_whose_grants_are_locked_at_the_edge_is_reclaimed_by_the_next_tick_once(world: World) -> None:
    grants, shrink = shrinking(world)
    head = audit_head()
    at = clock_now()

    with Holder([grant.pk for grant in grants]):
        [edge] = quota_windows_tick(now=at).applied
    assert edge.reclaimed == ()
    assert held({world.nlp.pk, world.speech.pk}, at) == 4  # beyond the new limit for now

    later = quota_windows_tick(now=at + TICK)

    assert held({world.nlp.pk, world.speech.pk}, at + TICK) == NEW_LIMIT
    assert later.applied == []
    [met] = later.met
    assert len(met.reclaimed) == 4 - NEW_LIMIT
    row = QuotaWindowEdge.objects.get(window=shrink)
    assert not row.reclaim_pending and row.reclaimed == list(met.reclaimed)
    assert len(audit_since(head, "quota_window.edge")) == 1
    [event] = audit_since(head, "quota_window.reclaim_met")
    assert event.details["reclaimed"] == list(met.reclaimed) and event.details["at"] == shrink.begins_at.isoformat()
    assert reclaimed_each_once(head)

    again = quota_windows_tick(now=at + 2 * TICK)
    assert (again.applied, again.met) == ([], [])
    assert len(audit_since(head, "quota_window.reclaim_met")) == 1
    assert QuotaWindowEdge.objects.filter(window=shrink).count() == 1


def test_a_pending_reclaim_waits_while_the_grants_stay_locked_and_takes_nothing_twice(world: World) -> None:
    grants, shrink = shrinking(world)
    head = audit_head()
    at = clock_now()

    with Holder([grant.pk for grant in grants]):
        quota_windows_tick(now=at)
        still = quota_windows_tick(now=at + TICK)
        assert still.met == []
        assert QuotaWindowEdge.objects.get(window=shrink).reclaim_pending
    met = quota_windows_tick(now=at + 2 * TICK).met

    assert len(met) == 1 and len(met[0].reclaimed) == 4 - NEW_LIMIT
    assert len(audit_since(head, "quota_window.reclaim_met")) == 1
    assert reclaimed_each_once(head)


def test_a_pending_reclaim_whose_shrink_is_over_is_met_without_taking_anything(world: World) -> None:
    grants, shrink = shrinking(world)
    QuotaWindow.objects.filter(pk=shrink.pk).update(ends_at=shrink.begins_at + HOUR)
    at = clock_now()
    with Holder([grant.pk for grant in grants]):
        quota_windows_tick(now=at)

    [met] = quota_windows_tick(now=shrink.begins_at + HOUR + TICK).met

    assert met.reclaimed == ()
    assert not QuotaWindowEdge.objects.get(window=shrink, kind="begin").reclaim_pending
    assert Allocation.objects.filter(pk__in=[g.pk for g in grants], state=AllocationState.RECLAIMED).count() == 0


def renewer(world: World, allocation_id: int, rounds: int) -> Callable[[], str]:
    def job() -> str:
        outcomes = Counter[str]()
        for step in range(rounds):
            try:
                changes.allocation_renew(actor=world.users["nlp_member"], allocation_id=allocation_id,
                                         ends_at=clock_now() + DAY + (step + 1) * HOUR)
                outcomes["renewed"] += 1
            except (QuotaExceeded, Conflict):
                outcomes["refused"] += 1
        return "renewer"
    return job


def ticker(at: datetime.datetime, rounds: int) -> Callable[[], str]:
    def job() -> str:
        for step in range(rounds):
            quota_windows_tick(now=at + step * TICK)
        return "ticker"
    return job


def test_four_owners_renewing_through_the_edge_never_keep_the_department_beyond_its_new_limit(world: World) -> None:
    grants, shrink = shrinking(world)
    head = audit_head()
    at = clock_now()

    outcomes = all_at_once([ticker(at, 3), *(renewer(world, grant.pk, 5) for grant in grants)])
    final = quota_windows_tick(now=at + 10 * TICK)

    assert outcomes == Counter({"renewer": 4, "ticker": 1}), outcomes
    assert held({world.nlp.pk, world.speech.pk}, at + 10 * TICK) <= NEW_LIMIT
    [row] = QuotaWindowEdge.objects.filter(window=shrink)
    assert not row.reclaim_pending, final
    assert len(audit_since(head, "quota_window.edge")) == 1
    assert len(audit_since(head, "quota_window.reclaim_met")) <= 1
    assert reclaimed_each_once(head)
    assert set(row.reclaimed) == set(Allocation.objects.filter(
        pk__in=[g.pk for g in grants], state=AllocationState.RECLAIMED).values_list("pk", flat=True))

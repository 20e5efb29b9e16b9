"""Quota window edges against concurrency, on real PostgreSQL connections from real threads: ticks
racing each other apply an edge once, and a tick applying a shrink while twenty approvals race it
never leaves the department beyond its new limit, nor takes a grant twice.

``nlp`` may hold 20 GPU-equivalents (and A100s); it holds 6 single-A100 grants when a window lowers
its limit to 4 (shrink policy ``reclaim``) from now on: without the window, ten more would fit on
the cluster's 16 A100s. Every request below crosses that edge, so it must fit
the shrunk quota; the grants beyond it are the tick's to reclaim, or an approval's to take as
oversubscribed, but never both's.
"""

from __future__ import annotations

import datetime
import time
from collections import Counter
from collections.abc import Callable

import pytest
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, AllocationState, PriorityClass, Quota
from allocations.models.windows import QuotaWindow, QuotaWindowEdge, ShrinkPolicy
from allocations.windows.tick import quota_windows_tick
from audit.models import AuditEvent
from kernel.errors import CapacityExceeded, Conflict, QuotaExceeded
from tests.conftest import World, requires_postgres
from tests.quotas.windowing import DAY, ask, audit_head, granted, held, quota, window
from tests.threads import all_at_once

pytestmark = [requires_postgres(), pytest.mark.django_db(transaction=True)]

APPROVALS = 20
NEW_LIMIT = 4


def shrinking(world: World, *, preemptible: bool) -> tuple[list[Allocation], QuotaWindow]:
    Quota.objects.filter(Q(flavor__isnull=True) | Q(flavor=world.a100), department=world.nlp).update(limit=20)
    Quota.objects.filter(department=world.acme).update(limit=32)
    if preemptible:
        PriorityClass.objects.filter(pk=world.preemptible.pk).update(preemptible=True)  # reclaimed at once
        world.preemptible.refresh_from_db()
    before = [granted(world, quantity=1, priority="preemptible" if preemptible else "standard") for _ in range(6)]
    now = timezone.now()
    edge = window(world, quota(world, "nlp"), begins_at=now, ends_at=now + 2 * DAY, limit=str(NEW_LIMIT),
                  shrink_policy=ShrinkPolicy.RECLAIM)
    return before, edge


def tick_job(at: datetime.datetime | None = None, *, pause: float = 0.0) -> Callable[[], str]:
    def job() -> str:
        time.sleep(pause)
        return f"edges {len(quota_windows_tick(now=at).applied)}"
    return job


def approval(world: World, allocation_id: int) -> Callable[[], str]:
    def job() -> str:
        try:
            return str(services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation_id).state)
        except QuotaExceeded:
            return "quota"
        except CapacityExceeded:
            return "capacity"
        except Conflict:
            return "conflict"
    return job


def reclaimed_twice(since: int) -> list[str]:
    counted = Counter(AuditEvent.objects.filter(seq__gt=since, action="allocation.reclaiming")
                      .values_list("target_id", flat=True))
    return [target for target, count in counted.items() if count > 1]


def test_ticks_racing_apply_an_edge_once_and_reclaim_each_grant_once(world: World) -> None:
    assert connection.vendor == "postgresql"
    before, edge = shrinking(world, preemptible=True)
    head = audit_head()
    at = timezone.now()

    outcomes = all_at_once([tick_job(at) for _ in range(4)])

    assert outcomes == Counter({"edges 1": 1, "edges 0": 3})
    [row] = QuotaWindowEdge.objects.filter(window=edge)
    assert len(row.reclaimed) == 2 and set(row.reclaimed) <= {grant.pk for grant in before}
    assert AuditEvent.objects.filter(seq__gt=head, action="quota_window.edge").count() == 1
    assert reclaimed_twice(head) == []
    assert held({world.nlp.pk, world.speech.pk}, at, leaving=True) == NEW_LIMIT


@pytest.mark.parametrize("preemptible", [True, False], ids=["at-once", "with-notice"])
def test_a_tick_racing_twenty_approvals_never_leaves_the_department_beyond_the_new_limit(
    world: World, preemptible: bool
) -> None:
    before, edge = shrinking(world, preemptible=preemptible)
    ids = [ask(world, quantity=1).pk for _ in range(APPROVALS)]
    head = audit_head()

    outcomes = all_at_once([tick_job(pause=0.01), *(approval(world, allocation_id) for allocation_id in ids)])

    assert outcomes["edges 1"] == 1 and not [key for key in outcomes if key.startswith("error")], outcomes
    admitted = Allocation.objects.filter(pk__in=ids).exclude(state=AllocationState.PENDING)
    assert admitted.count() == outcomes[AllocationState.APPROVED] + outcomes[AllocationState.SCHEDULED]
    assert admitted.count() + outcomes["quota"] + outcomes["conflict"] + outcomes["capacity"] == APPROVALS
    moment = timezone.now()
    assert held({world.nlp.pk, world.speech.pk}, moment) <= NEW_LIMIT  # once the notices run out
    assert sum(row.quantity for row in admitted) <= NEW_LIMIT
    assert reclaimed_twice(head) == []
    [row] = QuotaWindowEdge.objects.filter(window=edge)
    taken = set(Allocation.objects.filter(pk__in=[g.pk for g in before],
                                          state__in=[AllocationState.RECLAIMING, AllocationState.RECLAIMED])
                .values_list("pk", flat=True))
    assert set(row.reclaimed) <= taken
    by_approvals = taken - set(row.reclaimed)
    assert Allocation.objects.filter(pk__in=by_approvals, reclaimed_for__isnull=True).count() == 0

"""The cluster page proposes the defragmentation plan and lets a platform admin apply it."""

from __future__ import annotations

import pytest

from allocations.models import AllocationState
from audit.models import AuditEvent
from tests.conftest import World
from tests.foundation.test_placement_defrag import book, holding, live_places
from tests.frontend.conftest import Login

pytestmark = pytest.mark.django_db


def test_a_platform_admin_sees_the_plan_and_applies_it(world: World, login: Login) -> None:
    running = holding(world, flavor=world.mig, quantity=1, state=AllocationState.ACTIVE, starts_in_days=-1)
    book(running, [("a100-0", 0, 0)])
    future = holding(world, flavor=world.mig, quantity=3, state=AllocationState.ACTIVE, starts_in_days=3)
    book(future, [("a100-0", 1, 0), ("a100-0", 2, 0), ("a100-0", 3, 0)])
    client = login("platform")
    html = client.get(f"/platform/clusters/{world.cluster.pk}/").content.decode()
    assert "Now: 4 of 24 GPUs partly used, 3.43 GPU-equivalents stranded, 20 whole GPUs free." in html
    assert "After moving 3 units of 1 allocation: 1 of 24 GPUs partly used" in html
    assert f"#{future.pk} unit 0 (a100-1g): a100-0 gpu1@0 → a100-0 gpu0@" in html

    response = client.post(f"/platform/clusters/{world.cluster.pk}/defrag/", follow=True)
    assert "Moved 3 units: 1 of 24 GPUs partly used" in response.content.decode()
    assert {gpus for _, gpus, _ in live_places(future)} == {(0,)}
    event = AuditEvent.objects.get(action="allocation.moved")
    assert event.actor_username == "platform"
    html = client.get(f"/platform/clusters/{world.cluster.pk}/").content.decode()
    assert "could move, but no better layout was found" in html


def test_department_admins_may_neither_see_nor_apply_it(world: World, login: Login) -> None:
    client = login("nlp_admin")
    assert client.get(f"/platform/clusters/{world.cluster.pk}/").status_code == 403
    assert client.post(f"/platform/clusters/{world.cluster.pk}/defrag/").status_code == 403
    assert client.get(f"/platform/clusters/{world.cluster.pk}/defrag/").status_code == 405


def test_an_empty_cluster_says_nothing_can_move(world: World, login: Login) -> None:
    html = login("platform").get(f"/platform/clusters/{world.cluster.pk}/").content.decode()
    assert "No units of allocations that have not started: nothing can move." in html

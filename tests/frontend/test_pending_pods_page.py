"""The allocation page's pending pods panel: loaded after the page (HTMX), each pod with its reason
and fix, and a plain sentence when the cluster cannot be read (the page itself never waits on it)."""

from __future__ import annotations

import pytest

from allocations.grants import services
from delivery import pending_pods
from delivery.drivers.base import DriverError
from tests.conftest import World
from tests.frontend.conftest import Login, pending
from tests.pods.test_pods_api import WAITING, FakeDriver

pytestmark = pytest.mark.django_db


def test_the_page_loads_the_panel_and_the_panel_explains_each_pod(world: World, login: Login,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    allocation = pending(world)
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    driver = FakeDriver(WAITING)
    monkeypatch.setattr(pending_pods, "driver_for", lambda cluster: driver)
    page = login("nlp_member").get(f"/allocations/{allocation.pk}/").content.decode()
    assert 'id="pending-pods"' in page and f'hx-get="/allocations/{allocation.pk}/pods/"' in page
    assert driver.asked == []  # the page itself does not call the cluster
    panel = login("nlp_member").get(f"/allocations/{allocation.pk}/pods/", headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in panel
    alone = login("nlp_member").get(f"/allocations/{allocation.pk}/pods/").content.decode()  # without JavaScript
    assert "<html" in alone and "<code>pod-asks-more-than-granted</code>" in alone
    assert "<code>pod-asks-more-than-granted</code>" in panel and "the grant is 1" in panel
    assert "<code>pod-unschedulable-node-constraint</code>" in panel and "Fix: " in panel
    assert login("vision_member").get(f"/allocations/{allocation.pk}/pods/").status_code == 404


def test_an_unreachable_cluster_is_said_in_the_panel(world: World, login: Login, monkeypatch: pytest.MonkeyPatch) -> None:
    allocation = pending(world)
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    monkeypatch.setattr(pending_pods, "driver_for", lambda cluster: FakeDriver(DriverError("connection refused")))
    panel = login("nlp_member").get(f"/allocations/{allocation.pk}/pods/")
    assert panel.status_code == 200
    assert "could not be read now: connection refused" in panel.content.decode()


def test_a_request_not_on_a_cluster_has_no_panel(world: World, login: Login) -> None:
    page = login("nlp_member").get(f"/allocations/{pending(world).pk}/").content.decode()
    assert 'id="pending-pods"' not in page

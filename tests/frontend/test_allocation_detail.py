"""Allocation detail: the timeline from the audit log, release, withdraw and renew."""

from __future__ import annotations

import datetime

import pytest

from allocations.grants import services
from allocations.models import AllocationState
from tests.conftest import World
from tests.frontend.conftest import Login, pending

pytestmark = pytest.mark.django_db


def test_it_shows_the_timeline_and_sync_status(world: World, login: Login) -> None:
    allocation = pending(world)
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk, comment="enjoy")
    html = login("nlp_member").get(f"/allocations/{allocation.pk}/").content.decode()
    for text in ("An allocation was requested", "An allocation was approved", "“enjoy”", "state: pending → approved",
                 "pushing to test-cluster", "by nlp_admin"):
        assert text in html, text
    assert html.index("was requested") < html.index("was approved")
    assert "1 unit (1 GPU-equivalent)" in html  # never "1 unit (1 GPU-equivalents)"
    two = login("nlp_member").get(f"/allocations/{pending(world, quantity=2).pk}/").content.decode()
    assert "2 units (2 GPU-equivalents)" in two


def test_it_shows_the_gpus_the_units_are_booked_on_until_released(world: World, login: Login) -> None:
    allocation = pending(world)
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    row = allocation.reservations.select_related("node").get()
    html = login("nlp_member").get(f"/allocations/{allocation.pk}/").content.decode()
    assert f'<dd id="placement">{row.node.name}: gpu{row.gpu_indices[0]}</dd>' in html
    services.allocation_release(actor=world.users["nlp_member"], allocation_id=allocation.pk)
    assert 'id="placement"' not in login("nlp_member").get(f"/allocations/{allocation.pk}/").content.decode()


def test_it_releases_an_approved_allocation(world: World, login: Login) -> None:
    allocation = pending(world)
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    response = login("nlp_member").post(f"/allocations/{allocation.pk}/release/", {"comment": "done", "confirm": "yes"},
                                        follow=True)
    assert f"Allocation #{allocation.pk} is now released." in response.content.decode()
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.RELEASED


def test_a_pending_request_offers_no_renewal_a_grant_does(world: World, login: Login) -> None:
    """A request not granted yet has nothing to renew: its page offers withdrawing it, not a Renew form."""
    allocation = pending(world)
    html = login("nlp_member").get(f"/allocations/{allocation.pk}/").content.decode()
    assert "Withdraw request" in html
    assert "Renew" not in html and f'action="/allocations/{allocation.pk}/renew/"' not in html
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    html = login("nlp_member").get(f"/allocations/{allocation.pk}/").content.decode()
    assert f'action="/allocations/{allocation.pk}/renew/"' in html and "Renew until this date" in html


def test_it_renews_and_refuses_an_earlier_end(world: World, login: Login) -> None:
    allocation = pending(world)
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    client = login("nlp_member")
    later = allocation.ends_at.replace(second=0, microsecond=0) + datetime.timedelta(days=2)
    response = client.post(f"/allocations/{allocation.pk}/renew/", {"ends_at": later.strftime("%Y-%m-%dT%H:%M")},
                           follow=True)
    assert "now ends" in response.content.decode()
    allocation.refresh_from_db()
    assert allocation.ends_at == later
    response = client.post(f"/allocations/{allocation.pk}/renew/", {"ends_at": "2001-01-01T00:00"})
    assert response.status_code == 400
    assert f"The new end must be after the current end ({later:%Y-%m-%d %H:%M} UTC)." in response.content.decode()


def test_it_hides_changes_from_readers_without_the_right(world: World, login: Login) -> None:
    allocation = pending(world)
    html = login("auditor").get(f"/allocations/{allocation.pk}/").content.decode()
    assert "Release allocation" not in html and "Withdraw request" not in html and "Renew" not in html
    response = login("auditor").post(f"/allocations/{allocation.pk}/release/", follow=True)
    assert "Only the project&#x27;s members or the department&#x27;s admins" in response.content.decode()
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.PENDING

"""The allocation page says why a request waits (the same answer as the API) and the approvals
queue gives each row's reason code."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.conftest import World
from tests.why.test_reasons import _vision_holds_ten, ask

pytestmark = pytest.mark.django_db


def page(world: World, persona: str, path: str) -> str:
    client = Client()
    client.force_login(world.users[persona])
    response = client.get(path)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def test_the_allocation_page_says_why_with_the_parents_numbers_and_when(world: World) -> None:
    _vision_holds_ten(world)
    request = ask(world, flavor=world.a100, quantity=7)
    html = page(world, "nlp_member", f"/allocations/{request.pk}/")
    assert 'id="why-reason"><code>quota</code>' in html
    assert "acme · GPU-equivalents: asked 7, held 10, limit 16, effective 16" in html
    assert "<code>fewer-units</code> 6 × a100" in html and 'id="why-estimate">Estimated start: 20' in html
    assert "vision: 10 GPU-equivalents in 2 grants (guaranteed 0, borrowed 10)" in html


def test_the_approvals_queue_gives_each_row_its_reason(world: World) -> None:
    _vision_holds_ten(world)
    ask(world, flavor=world.a100, quantity=7)
    ask(world, flavor=world.a100, quantity=1)
    html = page(world, "nlp_admin", "/approvals/")
    assert html.count("Reason (docs/pending.md): <code>quota</code>") == 1
    assert html.count("Reason (docs/pending.md): <code>awaiting-decision</code>") == 1


def test_a_running_grant_has_no_why_panel(world: World) -> None:
    from allocations.grants import services
    granted = services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=ask(world, flavor=world.a100).pk)
    granted.state = "active"
    granted.save(update_fields=["state"])
    assert 'id="why"' not in page(world, "nlp_member", f"/allocations/{granted.pk}/")


def test_the_dashboard_shows_the_reason_last_read_for_a_waiting_request(world: World) -> None:
    from allocations.admission.why_refresh import waiting_reasons_refresh
    _vision_holds_ten(world)
    request = ask(world, flavor=world.a100, quantity=7)
    assert "waiting: <code>" not in page(world, "nlp_member", "/")  # not read yet
    waiting_reasons_refresh()
    html = page(world, "nlp_member", "/")
    assert f'href="/allocations/{request.pk}/#why">waiting: <code>quota</code>' in html

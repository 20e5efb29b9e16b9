"""Approval decides a pending request only: approving a grant that is scheduled (decided already,
waiting for its start) is a 409 naming its state, and its booking stays as it was. Found by the API
fuzzer once the demo had a scheduled grant: the second approval tried to book the units again."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from allocations.grants import services
from allocations.models import AllocationState, Reservation
from tests.conftest import World

pytestmark = pytest.mark.django_db


def test_approving_a_scheduled_grant_again_is_a_conflict_and_books_nothing(world: World) -> None:
    start = timezone.now() + datetime.timedelta(days=2)
    allocation = services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=1, priority_class=world.standard,
        starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="later",
    )
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.SCHEDULED
    booked = list(Reservation.objects.filter(allocation=allocation).values_list("pk", flat=True))

    answer = world.client("nlp_admin").post(f"/api/v1/allocations/{allocation.pk}/approve/", {}, format="json")

    assert answer.status_code == 409, answer.content
    assert answer.json()["error"]["details"]["state"] == AllocationState.SCHEDULED
    assert list(Reservation.objects.filter(allocation=allocation).values_list("pk", flat=True)) == booked

"""The submit's cheaper paths give what the ones they replace give: the plain reading of a body the
same values as ``AllocationIn`` (and a body it does not take is read by the serializer, which names
the field), the kept serializer the same answer as a new ``AllocationOut``, and the allocation
written with its notification in one statement the same rows as ``save`` then ``allocation_notify``."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from allocations.api.grants import AllocationOut, allocation_out
from allocations.api.submit_body import AllocationIn, submit_body, submit_project
from allocations.grants import services
from allocations.grants.notices import allocation_notify
from allocations.models import Allocation
from kernel.api.base import validated
from notifications import events
from notifications.models import Notification
from tenants.access import access_for
from tests.conftest import World


def drf_request(world: World, persona: str, body: Any) -> Any:
    """A DRF request carrying ``body`` as JSON, authenticated as ``persona``."""
    raw = APIRequestFactory().post("/api/v1/allocations/", body, format="json")
    request = APIView().initialize_request(raw)
    request.user = world.users[persona]
    return request


def bodies(world: World) -> list[dict[str, Any]]:
    start = timezone.now() + datetime.timedelta(minutes=5)
    plain = {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": 2, "ends_at": (start + datetime.timedelta(days=1)).isoformat(),
             "justification": "  trimmed on both sides  "}  # fmt: skip
    return [
        plain,
        {**plain, "starts_at": start.isoformat(), "priority_class": world.preemptible.pk, "cluster": world.cluster.pk},
        {**plain, "starts_at": None, "cluster": None, "ends_at": "2031-01-02T03:04:05"},  # naive: the current zone
        {**plain, "ends_at": (start + datetime.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")},
    ]


@pytest.mark.django_db
def test_a_plain_body_reads_as_the_serializer_reads_it_with_as_many_queries(world: World) -> None:
    access_for(world.users["nlp_member"])  # the caller's roles, read once per request either way
    for body in bodies(world):
        request = drf_request(world, "nlp_member", body)
        with CaptureQueriesContext(connection) as plain_queries:
            project = submit_project(request, world.users["nlp_member"])
            fast = submit_body(request, world.users["nlp_member"], project=project)
        with CaptureQueriesContext(connection) as serializer_queries:
            expected = validated(AllocationIn, drf_request(world, "nlp_member", body), project=project)
        assert fast == expected
        assert len(plain_queries) <= len(serializer_queries) + 1  # + the project, which the serializer was handed


@pytest.mark.django_db
def test_a_body_the_plain_reading_does_not_take_gets_the_serializers_answer(world: World) -> None:
    client = world.client("nlp_member")
    good = bodies(world)[0]
    cases = {
        "quantity": {**good, "quantity": 0},
        "justification": {**good, "justification": "   "},
        "ends_at": {**good, "ends_at": "tomorrow"},
        "flavor": {**good, "flavor": 10**6},
        "priority_class": {**good, "priority_class": None},
        "surprise": {**good, "surprise": 1},
    }
    for field, body in cases.items():
        response = client.post("/api/v1/allocations/", body, format="json")
        assert response.status_code == 400, (field, response.content)
        assert list(response.json()["error"]["fields"]) == [field]
    as_text = client.post("/api/v1/allocations/", {**good, "quantity": "2", "flavor": str(world.a100.pk)}, format="json")
    assert as_text.status_code == 201, as_text.content  # what DRF takes (numbers as text) is still taken
    assert as_text.json()["quantity"] == 2


@pytest.mark.django_db
def test_the_kept_serializer_answers_as_a_new_one(world: World) -> None:
    start = timezone.now() + datetime.timedelta(minutes=5)
    pending = services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.mig, quantity=1, priority_class=world.standard,
        starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="kept",
    )  # fmt: skip
    approved = services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=pending.pk, comment="ok")
    for allocation in (Allocation.objects.get(pk=pending.pk), approved):
        assert allocation_out(allocation) == dict(AllocationOut(allocation).data)


@pytest.mark.django_db
def test_the_allocation_and_its_notification_written_together_are_the_rows_written_apart(world: World) -> None:
    start = timezone.now() + datetime.timedelta(minutes=5)
    together = services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=1, priority_class=world.standard,
        starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="together",
    )  # fmt: skip
    written = Notification.objects.get(subject=f"allocation:{together.pk}")
    apart = Allocation.objects.get(pk=together.pk)
    apart.pk = None
    apart._state.adding = True
    apart.save()
    allocation_notify(events.SUBMITTED, apart, requested_by="nlp_member", justification="together")
    expected = Notification.objects.get(subject=f"allocation:{apart.pk}")
    fields = ("event", "department_id", "recipients", "dedupe_key", "fanned_out_at")
    assert [getattr(written, name) for name in fields] == [getattr(expected, name) for name in fields]
    assert written.payload == {**expected.payload, "allocation": together.pk}
    assert written.recipients == [world.users["nlp_admin"].pk]
    row = Allocation.objects.values().get(pk=together.pk)
    assert {key: value for key, value in row.items() if key not in ("id", "created_at", "updated_at")} == {
        key: value for key, value in Allocation.objects.values().get(pk=apart.pk).items() if key not in ("id", "created_at", "updated_at")
    }  # fmt: skip

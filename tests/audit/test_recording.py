"""Writing events: the chain fields, redaction, and the transaction they share with the change."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import DatabaseError, transaction

from audit import actions, services
from audit.integrity.canonical import GENESIS_HASH, leaf_hash
from audit.models import AuditEvent
from audit.services import AuditOutsideTransaction, audit_record
from kernel.request_context import RequestContext, request_context
from tenants.models import Department
from tests.audit.conftest import record, record_many
from tests.conftest import World

pytestmark = pytest.mark.django_db


def last_seq() -> int:
    return AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0


def test_it_chains_each_event_to_the_previous_one() -> None:
    start = last_seq()
    events = record_many([None, 7, 8, 7])
    assert [event.seq for event in events] == list(range(start + 1, start + 5))
    for previous, event in zip(events, events[1:], strict=False):
        assert event.prev_hash == previous.hash
        assert event.occurred_at >= previous.occurred_at
    for event in events:
        assert event.hash == leaf_hash(event.record.encode()).hex()
        assert json.loads(event.record)["seq"] == event.seq
    assert [event.department_seq for event in events] == [None, 1, 1, 2]
    assert events[3].payload["department_prev_hash"] == events[1].hash
    assert events[1].payload["department_prev_hash"] == GENESIS_HASH


def test_it_records_who_what_where_and_how(world: World) -> None:
    context = RequestContext(request_id="req-42", source_ip="10.1.2.3", user_agent="curl/8\r\nX-Forged: 1")
    with request_context(context), transaction.atomic():
        event = audit_record(
            actor=world.users["platform"], action=actions.DEPARTMENT_UPDATED, target=world.nlp,
            department_id=world.nlp.pk, before={"name": "NLP"}, after={"name": "Language"},
        )
    payload = event.payload
    assert payload["actor_username"] == "platform" and payload["actor_id"] == world.users["platform"].pk
    assert (payload["action"], payload["action_number"]) == ("department.updated", 201)
    assert (payload["target_type"], payload["target_id"]) == ("tenants.department", str(world.nlp.pk))
    assert (payload["before"], payload["after"]) == ({"name": "NLP"}, {"name": "Language"})
    assert (payload["request_id"], payload["source_ip"]) == ("req-42", "10.1.2.3")
    assert payload["user_agent"] == "curl/8\\x0d\\x0aX-Forged: 1"
    assert payload["outcome"] == "success" and payload["occurred_at"].endswith("Z")
    assert len(payload["nonce"]) == 32


def test_it_never_stores_a_secret_and_escapes_control_characters() -> None:
    event = record(details={
        "password": "hunter2", "api_token": "abc", "kubeconfig": "apiVersion: v1", "token_fingerprint": "sha256:ab",
        "note": "-----BEGIN OPENSSH PRIVATE KEY-----\nxyz", "auth": "Bearer eyJhbGciOi",
        "name": "line1\nline2\x1b[31mred", "nested": [{"secret": "s"}], "amount": 1.5,
    })
    details = event.details
    assert details["password"] == details["api_token"] == details["kubeconfig"] == "[redacted]"
    assert details["token_fingerprint"] == "sha256:ab"
    assert details["note"] == details["auth"] == "[redacted]"
    assert details["nested"] == [{"secret": "[redacted]"}]
    assert details["name"] == "line1\\x0aline2\\x1b[31mred"
    assert details["amount"] == 1.5
    assert "hunter2" not in event.record and "\n" not in event.record and "\x1b" not in event.record


@pytest.mark.django_db(transaction=True)
def test_it_refuses_to_record_outside_a_transaction() -> None:
    with pytest.raises(AuditOutsideTransaction, match="inside the transaction"):
        audit_record(actor=None, action=actions.NODE_UPDATED)


def test_it_refuses_an_unregistered_action() -> None:
    forged = actions.AuditAction(number=999, code="node.updated", description="imposter")
    with transaction.atomic(), pytest.raises(ValueError, match="not the registered one"):
        audit_record(actor=None, action=forged)


def test_a_rolled_back_action_leaves_no_event(world: World) -> None:
    before = last_seq()
    with pytest.raises(RuntimeError, match="later step failed"), transaction.atomic():
        department = Department.objects.create(slug="doomed", name="Doomed", parent=world.acme)
        audit_record(actor=world.users["platform"], action=actions.DEPARTMENT_CREATED, target=department)
        raise RuntimeError("a later step failed")
    assert last_seq() == before
    assert not Department.objects.filter(slug="doomed").exists()
    assert record().seq == before + 1  # and the chain goes on without a gap


def test_a_failed_audit_write_rolls_the_action_back(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise DatabaseError("disk full")

    monkeypatch.setattr(services, "_append_in_database", refuse)  # PostgreSQL's chain step
    monkeypatch.setattr(services, "_append_in_python", refuse)  # SQLite's
    with pytest.raises(DatabaseError, match="disk full"), transaction.atomic():
        department = Department.objects.create(slug="unaudited", name="Unaudited", parent=world.acme)
        audit_record(actor=world.users["platform"], action=actions.DEPARTMENT_CREATED, target=department)
    assert not Department.objects.filter(slug="unaudited").exists()


def test_the_database_refuses_an_event_out_of_sequence() -> None:
    event = record()
    with pytest.raises(DatabaseError, match="next number"), transaction.atomic():
        AuditEvent.objects.create(
            seq=event.seq + 2, occurred_at=event.occurred_at, action="node.updated", hash="0" * 64, record="{}"
        )


def test_it_exposes_the_record_fields_on_the_model() -> None:
    event = record(details={"in_use": "8"})
    assert event.details == {"in_use": "8"} and event.before == {} and event.after == {}
    assert event.source_ip is None and event.user_agent == ""
    assert str(event).startswith(f"{event.seq} node.updated")

"""The chain step sent as late as the transaction allows (``audit.linking``): before the next
statement, when a chain field is read, or with the COMMIT; never outside the writer's transaction."""

from __future__ import annotations

import pickle
import threading

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext

from audit import actions, linking
from audit.models import AuditEvent
from audit.services import audit_record
from audit.verification import audit_log_verify
from tenants.models import Department
from tests.audit.conftest import requires_postgres
from tests.conftest import World

pytestmark = requires_postgres


def last_seq() -> int:
    return AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0


@pytest.mark.django_db
def test_the_next_statement_sees_the_event(postgres: None) -> None:
    start = last_seq()
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        event = audit_record(actor=None, action=actions.NODE_UPDATED, details={"step": "deferred"})
        assert len(queries) == 0, "the chain step waits for the next statement or the COMMIT"
        found = AuditEvent.objects.order_by("-seq").first()
        assert len(queries) == 2 and "audit_event_append" in queries[0]["sql"]
    assert found is not None and found.seq == start + 1 and found.details == {"step": "deferred"}
    assert (event.seq, event.hash, event.record) == (found.seq, found.hash, found.record)


@pytest.mark.django_db
def test_reading_a_chain_field_appends_the_event(postgres: None) -> None:
    start = last_seq()
    with transaction.atomic():
        first = audit_record(actor=None, action=actions.NODE_UPDATED, department_id=961)
        second = audit_record(actor=None, action=actions.NODE_UPDATED, department_id=961)  # sends the first's step
        assert "seq" in first.__dict__ and "seq" not in second.__dict__
        assert second.prev_hash == first.hash and second.seq == start + 2
        assert second.department_seq == first.department_seq + 1  # type: ignore[operator]


@pytest.mark.django_db(transaction=True)
def test_the_last_event_goes_with_the_commit(postgres: None) -> None:
    start = last_seq()
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        event = audit_record(actor=None, action=actions.NODE_UPDATED, details={"step": "commit"})
    appends = [query["sql"] for query in queries if "audit_event_append" in query["sql"]]
    assert len(appends) == 1 and appends[0].endswith("-- with the COMMIT")
    assert event.seq == start + 1
    stored = AuditEvent.objects.get(seq=event.seq)
    assert (stored.hash, stored.record, stored.occurred_at) == (event.hash, event.record, event.occurred_at)
    audit_log_verify()


@pytest.mark.django_db(transaction=True)
def test_a_rollback_drops_the_pending_event(postgres: None) -> None:
    start = last_seq()
    with pytest.raises(RuntimeError, match="later"), transaction.atomic():
        event = audit_record(actor=None, action=actions.NODE_UPDATED)
        raise RuntimeError("a later step failed")
    with pytest.raises(linking.AuditEventNotLinked):
        _ = event.seq
    assert last_seq() == start
    with transaction.atomic():
        after = audit_record(actor=None, action=actions.NODE_UPDATED)
    assert after.seq == start + 1


@pytest.mark.django_db(transaction=True)
def test_a_failed_step_at_commit_rolls_the_change_back(postgres: None, world: World,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    start = last_seq()
    monkeypatch.setattr(linking, "APPEND", linking.APPEND.replace("audit_event_append", "audit_event_missing"))
    with pytest.raises(DatabaseError, match="audit_event_missing"), transaction.atomic():
        Department.objects.create(slug="unchained", name="Unchained", parent=world.acme)
        audit_record(actor=world.users["platform"], action=actions.DEPARTMENT_CREATED)
    assert not Department.objects.filter(slug="unchained").exists()
    assert last_seq() == start


@pytest.mark.django_db(transaction=True)
def test_the_chain_follows_the_commits_not_the_calls(postgres: None) -> None:
    """A writer whose event is still pending holds no chain lock: another writer appends and commits
    meanwhile, and the first one's event, committed later, comes after it."""
    start = last_seq()
    recorded, release = threading.Event(), threading.Event()
    seqs: dict[str, int] = {}
    errors: list[BaseException] = []

    def first() -> None:
        try:
            with transaction.atomic():
                event = audit_record(actor=None, action=actions.NODE_UPDATED, details={"writer": "first"})
                recorded.set()
                assert release.wait(timeout=30)
            seqs["first"] = event.seq
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=first)
    thread.start()
    assert recorded.wait(timeout=30)
    with transaction.atomic():
        second = audit_record(actor=None, action=actions.NODE_UPDATED, details={"writer": "second"})
    release.set()
    thread.join(timeout=60)
    assert not errors, errors
    assert (second.seq, seqs["first"]) == (start + 1, start + 2)
    assert AuditEvent.objects.get(seq=start + 2).prev_hash == second.hash
    audit_log_verify()


@pytest.mark.django_db
def test_a_copy_of_a_pending_event_is_linked_first(postgres: None) -> None:
    start = last_seq()
    with transaction.atomic():
        event = audit_record(actor=None, action=actions.NODE_UPDATED)
        copied = pickle.loads(pickle.dumps(event))  # noqa: S301 - our own object
    assert copied.seq == event.seq == start + 1 and copied.hash == event.hash and "_link" not in copied.__dict__

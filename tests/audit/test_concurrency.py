"""Concurrent writers on PostgreSQL leave one gapless, unforked chain (and department chains)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from audit import actions
from audit.models import AuditEvent
from audit.services import audit_record
from audit.verification import audit_log_verify
from tests.audit.conftest import requires_postgres

pytestmark = [pytest.mark.django_db(transaction=True), requires_postgres]

WRITERS, EVENTS_EACH = 8, 25


def test_concurrent_writers_leave_one_gapless_chain(postgres: None) -> None:
    start = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
    barrier = threading.Barrier(WRITERS)
    errors: list[BaseException] = []

    def write(writer: int) -> None:
        try:
            barrier.wait()
            for index in range(EVENTS_EACH):
                with transaction.atomic():
                    audit_record(actor=None, action=actions.NODE_UPDATED, department_id=950 + index % 3,
                                 details={"writer": writer, "index": index})
        except BaseException as error:  # reported below, on the main thread
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(writer,)) for writer in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    written = list(AuditEvent.objects.filter(seq__gt=start).order_by("seq").values_list("seq", flat=True))
    assert written == list(range(start + 1, start + 1 + WRITERS * EVENTS_EACH))
    for department in (950, 951, 952):
        numbers = list(AuditEvent.objects.filter(department_id=department).order_by("seq")
                       .values_list("department_seq", flat=True))
        assert numbers == list(range(1, len(numbers) + 1))
    report = audit_log_verify()
    assert report.events >= start + WRITERS * EVENTS_EACH

"""Concurrent writers on PostgreSQL, with real threads (one connection each): one gapless, unforked
chain (and department chains) in commit order, rolled-back writers leaving no gap, and the chain
lock held by a writer from its event until its transaction ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection, transaction

from audit import actions
from audit.integrity.canonical import GENESIS_HASH
from audit.models import AuditEvent
from audit.services import audit_record
from audit.verification import audit_log_verify
from tests.audit.conftest import requires_postgres

pytestmark = [pytest.mark.django_db(transaction=True), requires_postgres]

WRITERS, EVENTS_EACH = 8, 25


class RolledBack(Exception):
    pass


def last_seq() -> int:
    return AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0


def run_threads(target: Callable[[int], None], count: int) -> None:
    """``target(index)`` on ``count`` threads, each with its own connection; re-raises the first error."""
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            target(index)
        except BaseException as error:  # reported below, on the main thread
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors


def test_concurrent_writers_leave_one_gapless_chain_in_commit_order(postgres: None) -> None:
    """Every fifth transaction rolls back after writing its event; every third runs a statement after
    it (the others end with it: its chain step goes with the COMMIT). The committed events are numbered
    without a gap, and whenever one transaction committed before another began, its event comes first."""
    start = last_seq()
    barrier = threading.Barrier(WRITERS)
    lock = threading.Lock()
    committed: list[tuple[float, float, int]] = []  # (began, committed, seq)

    def write(writer: int) -> None:
        barrier.wait()
        for index in range(EVENTS_EACH):
            began = time.monotonic()
            try:
                with transaction.atomic():
                    event = audit_record(actor=None, action=actions.NODE_UPDATED, department_id=950 + index % 3,
                                         details={"writer": writer, "index": index})
                    if index % 3 == 0:  # a statement after the event sends its chain step before it
                        with connection.cursor() as cursor:
                            cursor.execute("SELECT 1")
                    if (writer + index) % 5 == 0:
                        raise RolledBack
            except RolledBack:
                continue
            with lock:
                committed.append((began, time.monotonic(), event.seq))

    run_threads(write, WRITERS)
    written = list(AuditEvent.objects.filter(seq__gt=start).order_by("seq").values_list("seq", flat=True))
    assert len(committed) == len(written) == WRITERS * EVENTS_EACH * 4 // 5
    assert written == list(range(start + 1, start + 1 + len(written)))
    assert sorted(seq for _, _, seq in committed) == written
    for _, done, seq in committed:  # commit order: what committed before a transaction began precedes it
        assert all(seq < later for began, _, later in committed if began > done)
    for department in (950, 951, 952):
        numbers = list(AuditEvent.objects.filter(department_id=department).order_by("seq")
                       .values_list("department_seq", flat=True))
        assert numbers == list(range(1, len(numbers) + 1))
    report = audit_log_verify()
    assert report.events >= start + len(written)


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_a_writer_holds_the_chain_from_its_event_until_its_transaction_ends(postgres: None, outcome: str) -> None:
    """The second writer waits for the first one's COMMIT (or ROLLBACK), not just for its event:
    that is what makes the chain's order the order of the commits. After a rollback it takes the
    number the first one gave back, linked to the event before it."""
    before = AuditEvent.objects.order_by("-seq").values_list("seq", "hash").first() or (0, GENESIS_HASH)
    linked, release, second_done = threading.Event(), threading.Event(), threading.Event()
    events: dict[int, AuditEvent] = {}

    def write(writer: int) -> None:
        if writer == 0:
            try:
                with transaction.atomic():
                    events[0] = audit_record(actor=None, action=actions.NODE_UPDATED, details={"writer": 0})
                    assert events[0].seq  # reading a chain field appends the event now (else: with the COMMIT)
                    linked.set()
                    assert release.wait(timeout=30)
                    if outcome == "rollback":
                        raise RolledBack
            except RolledBack:
                pass
            return
        assert linked.wait(timeout=30)
        with transaction.atomic():
            events[1] = audit_record(actor=None, action=actions.NODE_UPDATED, details={"writer": 1})
        second_done.set()

    thread = threading.Thread(target=lambda: run_threads(write, 2))
    thread.start()
    assert linked.wait(timeout=30)
    assert not second_done.wait(timeout=0.5), "the second writer appended while the first had not committed"
    release.set()
    thread.join(timeout=60)
    assert second_done.is_set()
    first, second = events[0], events[1]
    assert first.seq == before[0] + 1 and first.prev_hash == before[1]
    if outcome == "commit":
        assert (second.seq, second.prev_hash) == (first.seq + 1, first.hash)
    else:
        assert (second.seq, second.prev_hash) == (first.seq, before[1])
        assert not AuditEvent.objects.filter(hash=first.hash).exists()
    assert last_seq() == second.seq
    audit_log_verify()

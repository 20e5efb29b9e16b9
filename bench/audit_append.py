"""The append steps of ``bench/audit.py`` (each run in its own child process): ``audit_record``
from concurrent writers, against the same writers without the event and without the chain step,
and the server's ceiling of commits made one at a time."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from typing import Any


def django_setup(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuportal.settings")
    import django

    django.setup()



def _unchained_append(writer: int) -> Callable[[Any, tuple[str, ...], dict[str, Any]], None]:
    """In place of ``audit.services._append_in_database``: one INSERT instead of the chain step, its
    cursor closed as the real step's is."""

    def append(connection: Any, template: tuple[str, ...], columns: dict[str, Any]) -> None:
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO bench_bare VALUES (%s, %s)", [writer, len(template)])

    return append


def _writer(url: str, count: int, barrier: Any, writer: int, mode: str, done: Any) -> None:
    django_setup(url)
    from django.db import connection, transaction

    from audit import actions
    from audit.services import audit_record

    if mode == "unchained":  # all of audit_record's own work, then one INSERT instead of the chain step
        from audit import services

        vars(services)["_append_in_database"] = _unchained_append(writer)
    connection.ensure_connection()  # connecting (and the process's start and exit) is not what is measured
    barrier.wait()
    for index in range(count):
        with transaction.atomic():
            if mode == "bare":  # the same transaction without its event: one INSERT, no chain lock
                with connection.cursor() as cursor:
                    cursor.execute("INSERT INTO bench_bare VALUES (%s, %s)", [writer, index])
            else:
                audit_record(actor=None, action=actions.ALLOCATION_APPROVED, department_id=1 + (writer + index) % 20,
                             before={"state": "pending"}, after={"state": "approved"}, details={"writer": writer})
    done.put(time.monotonic())


def child_append(url: str, writers: int, each: int, mode: str = "event") -> dict[str, Any]:
    """``writers`` processes, each ``each`` transactions that record one event (``event``), or that
    do all of ``audit_record``'s work but insert one row instead of the chain step (``unchained``),
    or (``bare``) that insert one row into an unaudited table instead: what the machine allows the
    same writers. Timed from the moment all are connected and ready until the
    last one's last commit."""
    context = multiprocessing.get_context("spawn")
    barrier, done = context.Barrier(writers + 1), context.Queue()
    processes = [context.Process(target=_writer, args=(url, each, barrier, writer, mode, done))
                 for writer in range(writers)]
    for process in processes:
        process.start()
    barrier.wait()
    started = time.monotonic()
    finished = [done.get(timeout=600) for _ in processes]
    elapsed = max(finished) - started
    for process in processes:
        process.join()
    if any(process.exitcode for process in processes):
        raise SystemExit("a writer failed")
    if mode in ("bare", "unchained"):
        return {"events": writers * each, "seconds": elapsed}
    django_setup(url)
    from audit.models import AuditEvent

    seqs = list(AuditEvent.objects.order_by("seq").values_list("seq", flat=True))
    return {"events": writers * each, "seconds": elapsed, "gapless": seqs == list(range(1, len(seqs) + 1))}


def child_bare_table(url: str, create: bool) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        if create:
            connection.execute("CREATE TABLE bench_bare (writer int, index int)")
            connection.execute("GRANT INSERT ON bench_bare TO PUBLIC")
        else:
            connection.execute("DROP TABLE bench_bare")
    return {}


def child_commits(url: str, count: int) -> dict[str, Any]:
    """The ceiling of any serialised writer: one-row transactions committed one after another."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("CREATE TABLE bench_commit (id bigint)")
        started = time.perf_counter()
        for index in range(count):
            with connection.transaction():
                connection.execute("INSERT INTO bench_commit VALUES (%s)", [index])
        elapsed = time.perf_counter() - started
        connection.execute("DROP TABLE bench_commit")
    return {"commits": count, "seconds": elapsed}

"""One approval held at a chosen point of its transaction while another writer runs into it, on
real PostgreSQL connections from real threads: the interleaving of a deadlock, made every time
instead of once in a thousand runs under load."""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, Flavor
from tenants.models import Project
from tests.conftest import World
from tests.threads import all_at_once

WAIT_S = 10.0


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        row = cursor.fetchone()
    assert row is not None
    return int(row[0])


def waits_for_a_lock(pid: int) -> bool:
    """Whether the backend ``pid`` waits for a lock now (``pg_locks`` is read afresh each time,
    unlike ``pg_stat_activity``, which a transaction reads once)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted)", [pid])
        row = cursor.fetchone()
    return bool(row and row[0])


def pending_request(world: World, *, project: Project, flavor: Flavor, persona: str) -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users[persona], project=project, flavor=flavor, quantity=1, priority_class=world.standard,
        starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="lock order",
    )  # fmt: skip


def approval_racing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, *, world: World, allocation_id: int, admin: str,
    writer: Callable[[], Any], hold_at: str = "_candidate_clusters",
) -> tuple[Counter[str], list[str], bool]:  # fmt: skip
    """Approve ``allocation_id`` and run ``writer`` on two threads: the approval stops when it calls
    ``allocations.grants.services.<hold_at>`` (by default: holding its allocation and its department chain,
    before it locks its clusters); then the writer runs, and the approval goes on once the writer
    waits for a lock or has finished without waiting (or after ``WAIT_S``). Returns what each
    thread ended with, the warnings of transactions run again after a deadlock, and whether the
    writer did wait for the approval's locks (else the interleaving was not the one asked for)."""
    original = getattr(services, hold_at)
    holding = threading.Event()
    writer_pid: list[int] = []
    calls: list[int] = []
    waited: list[bool] = []
    finished = threading.Event()

    def held(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # the first attempt only: a retry after a deadlock goes straight on
            holding.set()
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline and not waited and not finished.is_set():
                if writer_pid and waits_for_a_lock(writer_pid[0]):
                    waited.append(True)
                time.sleep(0.02)
        return original(*args, **kwargs)

    monkeypatch.setattr(services, hold_at, held)

    def approve() -> str:
        services.allocation_approve(actor=world.users[admin], allocation_id=allocation_id)
        return "approved"

    def write() -> str:
        assert holding.wait(timeout=30)
        writer_pid.append(backend_pid())
        try:
            writer()
        finally:
            finished.set()
        return "written"

    caplog.set_level(logging.WARNING, logger="kernel.transactions")
    outcomes = all_at_once([approve, write])
    retried = [record.getMessage() for record in caplog.records if record.name == "kernel.transactions"]
    return outcomes, retried, bool(waited)

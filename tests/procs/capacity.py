"""The simulator's capacity invariant (``tests/simulation/invariants_capacity.capacity``) on the
database while other processes write it: a thread of its own takes a consistent snapshot (one
REPEATABLE READ transaction) each time a client asks, and once more at the end."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

from django.db import connection, transaction

from kernel.clock import clock_now
from tests.simulation.context import Context
from tests.simulation.faults import Faults
from tests.simulation.invariants_capacity import capacity
from tests.simulation.ledger import Snapshot, snapshot_read
from tests.simulation.world import SimWorld


def capacity_now() -> list[tuple[str, str]]:
    """What the capacity invariant finds in the database as one transaction sees it."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        snapshot: Snapshot = snapshot_read(clock_now())
    # The invariant reads no world and arms no fault: only what it remembers of inventory moves,
    # and nothing moves the inventory here.
    context = Context(world=cast(SimWorld, None), faults=Faults(), snapshot=snapshot)
    return capacity(context, snapshot)


class CapacityWatch:
    def __init__(self) -> None:
        self.checked = 0
        self.found: list[tuple[str, str]] = []
        self._asked = threading.Semaphore(0)
        self._done = threading.Event()

    def request(self) -> None:
        """Take one more snapshot (the watch may gather requests that come together)."""
        self._asked.release()

    def _run(self) -> None:
        try:
            while True:
                self._asked.acquire()
                if self._done.is_set():
                    return
                self.found += [found for found in capacity_now() if found not in self.found]
                self.checked += 1
        finally:
            connection.close()

    @contextmanager
    def running(self) -> Iterator[CapacityWatch]:
        thread = threading.Thread(target=self._run, name="capacity-watch")
        thread.start()
        try:
            yield self
        finally:
            self._done.set()
            self._asked.release()
            thread.join(timeout=120)

    def final(self) -> list[tuple[str, str]]:
        return capacity_now()

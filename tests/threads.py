"""Run jobs on real threads released together, for the concurrency tests on PostgreSQL."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from django.db import connection


def all_at_once(jobs: list[Callable[[], str]], *, timeout: float = 120) -> Counter[str]:
    """Start each job on its own thread, let them all go at once through a barrier, and count
    what they return; an unexpected exception counts as ``error: ...``. Every thread closes its
    own database connection."""
    barrier = threading.Barrier(len(jobs))
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def run(job: Callable[[], str]) -> None:
        try:
            barrier.wait(timeout=30)
            outcome = job()
        except Exception as error:  # noqa: BLE001 - any failure is what the tests look for
            outcome = f"error: {error!r}"
        finally:
            connection.close()
        with lock:
            outcomes[outcome] += 1

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    assert not any(thread.is_alive() for thread in threads)
    return outcomes

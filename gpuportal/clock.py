"""The clock of the embedded default: with in-process tasks there is no Celery beat, so the serving
process runs the time-driven allocation work itself (grants that ended expire, reclaims whose notice
ran out finish, scheduled grants whose start came are provisioned) every ``TICK_SECONDS``, at most
that late. With a broker, beat's ``allocations-timeline`` entry does the same and this stays off."""

from __future__ import annotations

import logging
import threading

from celery import current_app
from django.db import connections

log = logging.getLogger(__name__)

TIMELINE_TASK = "allocations.tasks.allocations_timeline_task"
TICK_SECONDS = 30.0


class Clock:
    """Runs the timeline task on a daemon thread every ``interval`` seconds; a failed tick is
    logged and the next one runs as usual."""

    def __init__(self, *, interval: float = TICK_SECONDS) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuportal-clock", daemon=True)

    def start(self) -> Clock:
        self._thread.start()
        return self

    def stop(self, *, timeout: float | None = None) -> None:
        self._stop.set()
        self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def tick(self) -> dict[str, int]:
        try:
            result = current_app.tasks[TIMELINE_TASK].apply().get(propagate=True)
            return dict(result)
        except Exception:  # the next tick tries again
            log.exception("the in-process timeline tick failed")
            return {}
        finally:
            connections.close_all()  # this thread's connections only

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.tick()


_clock: Clock | None = None
_guard = threading.Lock()


def clock_start() -> Clock | None:
    """Start this process's clock when tasks run in-process; once per process."""
    global _clock
    if not current_app.conf.task_always_eager:
        return None
    with _guard:
        if _clock is None or not _clock.running:
            _clock = Clock().start()
        return _clock

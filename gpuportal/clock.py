"""The clock of the embedded default: with in-process tasks there is no Celery beat, so the serving
process runs the periodic schedule's work itself (``gpuportal/periodic.py``, the entries beat runs
that are marked for the clock), each at its own interval: every ``TICK_SECONDS`` the clock runs the
timeline (window edges, expiry, reclaims whose notice ran out, scheduled starts), then every other
entry whose interval has passed since it last ran (all of them on the first tick). With a broker,
beat runs the same entries and this stays off."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from celery import Task, current_app
from django.db import connections
from django.utils.module_loading import import_string

from gpuportal.periodic import Periodic, clock_entries
from kernel.conf import setting
from kernel.periodic import PeriodicThread

log = logging.getLogger(__name__)

TIMELINE = "allocations-timeline"
TICK_SECONDS = 30.0
ENTRIES: tuple[Periodic, ...] = clock_entries()
TASKS: dict[str, Task[Any, Any]] = {entry.name: import_string(entry.task) for entry in ENTRIES}
"""The clock's tasks, imported here so that they are registered in the serving process, whose
start-up does not import the apps' task modules."""
TIMELINE_TASK = TASKS[TIMELINE].name


class Clock(PeriodicThread):
    """Runs the clock's entries on a daemon thread, checking every ``interval`` seconds which are
    due; a failed entry is logged and runs again when next due."""

    thread_name = "gpuportal-clock"

    def __init__(self, *, interval: float = TICK_SECONDS) -> None:
        super().__init__(interval=interval)
        self._last_run: dict[str, float] = {}

    def start(self) -> Clock:
        super().start()
        return self

    def tick(self) -> dict[str, int]:
        """The timeline, then every other entry that is due; returns what the timeline moved."""
        try:
            result = TASKS[TIMELINE].apply().get(propagate=True)
            return dict(result)
        except Exception:  # the next tick tries again
            log.exception("the in-process timeline tick failed")
            return {}
        finally:
            self.run_due()
            connections.close_all()  # this thread's connections only

    def run_due(self) -> list[str]:
        """Every entry but the timeline that is wanted and due now, in the schedule's order."""
        ran = []
        for entry in ENTRIES:
            if entry.name == TIMELINE or not entry.wanted(setting):
                continue
            now = time.monotonic()
            last = self._last_run.get(entry.name)
            if last is not None and now - last < entry.seconds(setting):
                continue
            self._last_run[entry.name] = now
            ran.append(entry.name)
            try:
                TASKS[entry.name].apply().get(propagate=True)
            except Exception:
                log.exception("the in-process %s failed", entry.name)
        return ran

    def run_once(self) -> dict[str, int]:
        return self.tick()


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

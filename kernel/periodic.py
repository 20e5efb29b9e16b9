"""A daemon thread that runs one piece of work every ``interval`` seconds, for the serving
process of the embedded default (in-process tasks, hence no Celery beat): the push sweeper
(``clusters.outbox``) and the allocation clock (``gpuportal.clock``)."""

from __future__ import annotations

import threading


class PeriodicThread:
    """Calls :meth:`run_once` every ``interval`` seconds on a daemon thread until stopped.
    Subclasses make ``run_once`` catch and log their own failures, so the next run happens."""

    thread_name = "gpuportal-periodic"

    def __init__(self, *, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)

    def start(self) -> PeriodicThread:
        self._thread.start()
        return self

    def stop(self, *, timeout: float | None = None) -> None:
        self._stop.set()
        self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def run_once(self) -> object:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.run_once()

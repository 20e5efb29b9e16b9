"""An online estimate of the typical task classes, for when no workload history is given.

Counts request shapes as they arrive and rebuilds the class set after 1, 2, 4, ... 1024 requests
and then every 1024, so caches keyed on the workload are rebuilt rarely.
"""

from __future__ import annotations

from ..decisions import Request
from ..workload import Workload


class WorkloadEstimate:
    def __init__(self, refresh_every: int = 1024) -> None:
        self.seen: list[Request] = []
        self.refresh_every = refresh_every
        self._next = 1
        self._workload = Workload(())

    def observe(self, request: Request) -> bool:
        """Record ``request``; True when the estimated workload changed."""
        self.seen.append(request)
        if len(self.seen) < self._next:
            return False
        self._next = len(self.seen) * 2 if len(self.seen) < self.refresh_every else len(self.seen) + self.refresh_every
        self._workload = Workload.from_requests(self.seen[-8 * self.refresh_every:], coverage=1.0)
        return True

    def workload(self) -> Workload:
        return self._workload

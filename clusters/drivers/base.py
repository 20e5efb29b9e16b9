"""The interface every cluster driver implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class DriverError(Exception):
    """The cluster could not be brought to the desired state; the message says why."""


@dataclass(frozen=True)
class ApplyResult:
    applied: int
    pruned: int
    unchanged: int


class ClusterDriver(Protocol):
    def apply_project(self, *, namespace: str, objects: list[dict[str, Any]]) -> ApplyResult:
        """Make the project's managed objects exactly ``objects``: create or update each, and
        prune managed objects of that project that are no longer listed."""
        ...

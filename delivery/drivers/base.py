"""The interface every cluster driver implements, and the vocabulary of a plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


class DriverError(Exception):
    """The cluster could not be brought to the desired state; the message says why. Worth retrying."""


class PermanentDriverError(DriverError):
    """Retrying cannot help until someone changes something (a bad kubeconfig, missing rights)."""


@dataclass(frozen=True)
class ApplyResult:
    applied: int
    pruned: int
    unchanged: int

    def __add__(self, other: ApplyResult) -> ApplyResult:
        return ApplyResult(self.applied + other.applied, self.pruned + other.pruned, self.unchanged + other.unchanged)


EMPTY_RESULT = ApplyResult(applied=0, pruned=0, unchanged=0)


@dataclass(frozen=True)
class Scope:
    """A set of objects the portal manages as a whole: one project's namespace (``namespace``
    set), or the cluster-wide objects (``namespace`` None). Live objects of a scope that are not
    in ``objects`` are pruned; partial Nodes are never deleted."""

    namespace: str | None
    objects: list[dict[str, Any]]

    @property
    def label(self) -> str:
        return f"project {self.namespace}" if self.namespace else "cluster-wide objects"


@dataclass(frozen=True)
class Change:
    action: str  # create | update | delete
    kind: str
    name: str
    namespace: str = ""
    scope: str = ""
    desired: dict[str, Any] | None = None
    live: dict[str, Any] | None = None
    fields: tuple[str, ...] = field(default_factory=tuple)
    location: str = ""  # where the driver keeps the object, when not derivable (the manifests file)

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


@dataclass(frozen=True)
class Plan:
    changes: list[Change]
    unchanged: int

    @property
    def is_empty(self) -> bool:
        return not self.changes


class ClusterDriver(Protocol):
    def plan(self, scopes: list[Scope]) -> Plan:
        """Compare the scopes' desired objects with what the cluster has; writes nothing."""
        ...

    def apply(self, plan: Plan) -> ApplyResult:
        """Carry out a plan: create or update each changed object, delete each pruned one."""
        ...

    def apply_project(self, *, namespace: str, objects: list[dict[str, Any]]) -> ApplyResult:
        """Make the project's managed objects exactly ``objects``: create or update each, and
        prune managed objects of that project that are no longer listed."""
        ...

    def read_nodes(self) -> list[dict[str, Any]]:
        """The cluster's Node objects (discovery)."""
        ...

    def namespace_exists(self, name: str) -> bool:
        """Whether the namespace ``name`` exists on the cluster (a prerequisite the portal does
        not create, such as the GPU operator's)."""
        ...

    def close(self) -> None: ...

"""The interface every cluster driver implements, and the vocabulary of a plan."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Protocol

from delivery.eviction import PodEviction
from delivery.pod_reasons import PendingRead


class DriverError(Exception):
    """The cluster could not be brought to the desired state; the message says why. Worth retrying."""


class PermanentDriverError(DriverError):
    """Retrying cannot help until someone changes something (a bad kubeconfig, missing rights)."""


class NotReadable(PermanentDriverError):
    """The driver cannot read this from its cluster at all (a manifests folder has no pods)."""


@dataclass(frozen=True)
class ApplyResult:
    """What a push did: objects applied, pruned and left unchanged, and the pods it evicted
    because they were beyond a lowered GPU quota, or chose to evict but could not yet
    (``held_back``: a PodDisruptionBudget forbids it now; the next push tries again)."""

    applied: int
    pruned: int
    unchanged: int
    evicted: tuple[PodEviction, ...] = ()
    held_back: tuple[PodEviction, ...] = ()

    def __add__(self, other: ApplyResult) -> ApplyResult:
        return ApplyResult(
            self.applied + other.applied, self.pruned + other.pruned, self.unchanged + other.unchanged,
            self.evicted + other.evicted, self.held_back + other.held_back,
        )


EMPTY_RESULT = ApplyResult(applied=0, pruned=0, unchanged=0)


@dataclass(frozen=True)
class Scope:
    """A set of objects the portal manages as a whole: one project's namespace (``namespace``
    set), or the cluster-wide objects (``namespace`` None). Live objects of a scope that are not
    in ``objects`` are pruned; partial Nodes are never deleted. ``managed_resources``: the GPU
    resources the portal manages (the flavors' resource names); a project's namespace may hold
    none of them beyond its desired quotas, and those its quota does not list count as 0.
    ``kept`` and ``prune`` let a push of the cluster-wide objects carry only what changed."""

    namespace: str | None
    objects: list[dict[str, Any]]
    managed_resources: tuple[str, ...] = ()
    # Objects of the scope that are wanted as they were last applied (``delivery.applied``): not
    # rendered, not compared, never pruned. Keys: (kind, namespace or "", name).
    kept: frozenset[tuple[str, str, str]] = frozenset()
    # False: the push only creates or updates ``objects``; it reads nothing to prune and deletes nothing.
    prune: bool = True

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
    # Desired objects the cluster does not have and the portal never creates (a Node not, or not
    # yet, registered): neither applied nor unchanged. Keys: (kind, namespace or "", name).
    absent: frozenset[tuple[str, str, str]] = frozenset()

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

    def enforce_quotas(self, scopes: list[Scope]) -> ApplyResult:
        """Evict the running pods beyond each project scope's desired GPU quotas (the choice is
        :func:`delivery.eviction.evictions_choose`); a pod a PodDisruptionBudget protects now is
        held back, not an error. Returns only ``evicted`` and ``held_back``."""
        ...

    def read_nodes(self) -> list[dict[str, Any]]:
        """The cluster's Node objects (discovery)."""
        ...

    def namespace_exists(self, name: str) -> bool:
        """Whether the namespace ``name`` exists on the cluster (a prerequisite the portal does
        not create, such as the GPU operator's)."""
        ...

    def read_pending(self, *, namespace: str, older_than: datetime.timedelta) -> PendingRead:
        """What waits in the tenant namespace ``namespace`` for longer than ``older_than``: its
        Pending pods and the controllers whose pods were refused, with the events about them
        (``delivery.drivers.kube_pending``). Read-only; :class:`NotReadable` where the driver
        has no cluster to read."""
        ...

    def close(self) -> None: ...

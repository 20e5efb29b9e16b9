"""Desired Kubernetes objects for a project on a cluster. Pure functions: no I/O, no database."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "gpuportal"
DEPARTMENT_LABEL = "gpuportal.io/department"
PROJECT_LABEL = "gpuportal.io/project"
QUOTA_NAME = "gpuportal-gpu-quota"


@dataclass(frozen=True)
class GrantedUnits:
    """The part of a project's desired state one allocation contributes."""

    resource_name: str
    quantity: int
    cpu_millicores_per_unit: int
    memory_mib_per_unit: int


@dataclass(frozen=True)
class ProjectState:
    cluster: str
    namespace: str
    department: str
    project: str
    grants: tuple[GrantedUnits, ...]

    @property
    def is_empty(self) -> bool:
        return not self.grants


def _labels(state: ProjectState) -> dict[str, str]:
    return {
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
        DEPARTMENT_LABEL: state.department,
        PROJECT_LABEL: state.project,
    }


def render_namespace(state: ProjectState) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": state.namespace, "labels": _labels(state)},
    }


def quota_hard(grants: tuple[GrantedUnits, ...]) -> dict[str, str]:
    """``requests.``-prefixed keys: ``limits.*`` is not enforced for extended resources."""
    units: dict[str, int] = defaultdict(int)
    cpu = 0
    memory = 0
    for grant in grants:
        units[grant.resource_name] += grant.quantity
        cpu += grant.quantity * grant.cpu_millicores_per_unit
        memory += grant.quantity * grant.memory_mib_per_unit
    hard = {f"requests.{name}": str(count) for name, count in sorted(units.items())}
    hard["requests.cpu"] = f"{cpu}m"
    hard["requests.memory"] = f"{memory}Mi"
    return hard


def render_resource_quota(state: ProjectState) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": QUOTA_NAME, "namespace": state.namespace, "labels": _labels(state)},
        "spec": {"hard": quota_hard(state.grants)},
    }


def render_project(state: ProjectState) -> list[dict[str, Any]]:
    """Every object the project needs on the cluster; an empty list once nothing is granted."""
    if state.is_empty:
        return []
    return [render_namespace(state), render_resource_quota(state)]

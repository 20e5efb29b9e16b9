"""Desired Kubernetes objects from the database's desired state. Pure functions: no I/O, no database.

Per project namespace: Namespace, ResourceQuota (the project's total, plus one per priority class
and a zero quota for every other class), LimitRange, RoleBindings, NetworkPolicy. Cluster-wide:
PriorityClasses and, where the cluster uses Volcano, one Queue per department. Per-node device
configurations live in :mod:`delivery.node_configs`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from delivery.container_limits import container_limits

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "gpuportal"
DEPARTMENT_LABEL = "gpuportal.io/department"
PROJECT_LABEL = "gpuportal.io/project"
SCOPE_LABEL = "gpuportal.io/scope"
SCOPE_CLUSTER = "cluster"
QUOTA_NAME = "gpuportal-gpu-quota"
PRIORITY_QUOTA_PREFIX = "gpuportal-priority-"
OTHER_PRIORITIES_QUOTA = "gpuportal-priority-other"
LIMIT_RANGE_NAME = "gpuportal-defaults"
NETWORK_POLICY_NAME = "gpuportal-tenant-isolation"
EDIT_BINDING = "gpuportal-members-edit"
VIEW_BINDING = "gpuportal-admins-view"
QUEUE_PREFIX = "gpuportal-"
PINNED_LABEL = "gpuportal.io/pinned"
BOOKED_NODES_ANNOTATION = "gpuportal.io/booked-nodes"
BOOKED_GPUS_ANNOTATION = "gpuportal.io/booked-gpus"
HAMI_MEMORY_KEY = "limits.nvidia.com/gpumem"
HAMI_CORES_KEY = "limits.nvidia.com/gpucores"

# What a retained namespace without a grant may use besides GPUs: nothing.
IDLE_COMPUTE = {"requests.cpu": "0", "requests.memory": "0", "limits.cpu": "0", "limits.memory": "0"}

# Namespaced kinds a project owns, in the order they are applied (the Namespace first).
PROJECT_KINDS = ("Namespace", "ResourceQuota", "LimitRange", "RoleBinding", "NetworkPolicy")


@dataclass(frozen=True)
class GrantedUnits:
    """The part of a project's desired state one allocation contributes.

    ``hami_memory_mib`` / ``hami_cores`` are per unit and non-zero only where HAMi enforces the
    resource: there its quota must also cover memory (MiB) and cores (% of a GPU).
    """

    resource_name: str
    quantity: int
    cpu_millicores_per_unit: int
    memory_mib_per_unit: int
    priority_class: str = ""
    hami_memory_mib: int = 0
    hami_cores: int = 0
    # Per unit, further resources the quota caps with ``requests.`` keys (Volcano vGPU memory and
    # cores, ``delivery.volcano.vgpu_unit_resources``).
    extra_requests: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class ProjectState:
    cluster: str
    namespace: str
    department: str
    project: str
    grants: tuple[GrantedUnits, ...]
    editors: tuple[str, ...] = ()
    viewers: tuple[str, ...] = ()
    # GPU resources to hold at zero while a retained namespace has no grant (retain-namespace policy).
    idle_resources: tuple[str, ...] = ()
    # Where the project's live bookings are (sorted): node names and, under HAMi, GPU UUIDs.
    booked_nodes: tuple[str, ...] = ()
    booked_gpus: tuple[str, ...] = ()
    pinned: bool = False  # the cluster pins bookings (Cluster.pin_bookings, delivery.pinning)

    @property
    def is_empty(self) -> bool:
        return not self.grants


@dataclass(frozen=True)
class LimitDefaults:
    cpu: str = "100m"
    memory: str = "256Mi"


def object_labels(state: ProjectState) -> dict[str, str]:
    return {
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
        DEPARTMENT_LABEL: state.department,
        PROJECT_LABEL: state.project,
    }


def cluster_labels() -> dict[str, str]:
    return {MANAGED_BY_LABEL: MANAGED_BY_VALUE, SCOPE_LABEL: SCOPE_CLUSTER}


def _meta(state: ProjectState, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": state.namespace, "labels": object_labels(state)}


def namespace_annotations(state: ProjectState) -> dict[str, str]:
    """Where the project's pods may run: its booked nodes (none: nowhere, for now) and, on HAMi
    clusters, its booked GPUs' UUIDs; the admission policies of ``delivery.pinning`` read them
    (nothing when the cluster does not pin bookings)."""
    if not state.pinned:
        return {}
    annotations = {BOOKED_NODES_ANNOTATION: ",".join(state.booked_nodes)}
    if state.booked_gpus:
        annotations[BOOKED_GPUS_ANNOTATION] = ",".join(state.booked_gpus)
    return annotations


def render_namespace(state: ProjectState) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": state.namespace,
            "labels": {**object_labels(state), **({PINNED_LABEL: "true"} if state.pinned else {})},
            "annotations": namespace_annotations(state),
        },
    }


def _gpu_totals(grants: Iterable[GrantedUnits]) -> dict[str, int]:
    units: dict[str, int] = defaultdict(int)
    for grant in grants:
        units[grant.resource_name] += grant.quantity
    return units


def quota_hard(grants: tuple[GrantedUnits, ...]) -> dict[str, str]:
    """``requests.``-prefixed keys for the GPUs (``limits.*`` is not enforced for extended
    resources); CPU and memory from the flavors' per-unit values, as requests and as limits (the
    LimitRange fills in both for containers that name none); HAMi's own ``limits.`` keys where it
    applies."""
    cpu = sum(grant.quantity * grant.cpu_millicores_per_unit for grant in grants)
    memory = sum(grant.quantity * grant.memory_mib_per_unit for grant in grants)
    hard = {f"requests.{name}": str(count) for name, count in sorted(_gpu_totals(grants).items())}
    hard["requests.cpu"] = f"{cpu}m"
    hard["requests.memory"] = f"{memory}Mi"
    hard["limits.cpu"] = f"{cpu}m"
    hard["limits.memory"] = f"{memory}Mi"
    extra: dict[str, int] = defaultdict(int)
    for grant in grants:
        for name, amount in grant.extra_requests:
            extra[name] += grant.quantity * amount
    hard.update({f"requests.{name}": str(total) for name, total in sorted(extra.items())})
    hami_memory = sum(grant.quantity * grant.hami_memory_mib for grant in grants)
    hami_cores = sum(grant.quantity * grant.hami_cores for grant in grants)
    if hami_memory or hami_cores:
        hard[HAMI_MEMORY_KEY] = str(hami_memory)
        hard[HAMI_CORES_KEY] = str(hami_cores)
    return hard


def render_resource_quota(state: ProjectState) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta(state, QUOTA_NAME),
        "spec": {"hard": quota_hard(state.grants)},
    }


def render_priority_quotas(state: ProjectState) -> list[dict[str, Any]]:
    """One quota per granted priority class, capping what pods of that class may request, and one
    holding every other class (and pods without one) at zero GPUs: a grant is for its class only.
    They carry GPUs only: CPU and memory are capped for the namespace as a whole (its quota and
    LimitRange), so a pod that names no class and no GPU (a data copy) still runs within them."""
    by_class: dict[str, list[GrantedUnits]] = defaultdict(list)
    for grant in state.grants:
        if grant.priority_class:
            by_class[grant.priority_class].append(grant)
    if not by_class:
        return []
    quotas = []
    for name, grants in sorted(by_class.items()):
        hard = {f"requests.{resource}": str(count) for resource, count in sorted(_gpu_totals(grants).items())}
        quotas.append(_scoped_quota(state, f"{PRIORITY_QUOTA_PREFIX}{name}", hard, "In", [name]))
    zero = {f"requests.{resource}": "0" for resource in sorted(_gpu_totals(state.grants))}
    quotas.append(_scoped_quota(state, OTHER_PRIORITIES_QUOTA, zero, "NotIn", sorted(by_class)))
    return quotas


def _scoped_quota(state: ProjectState, name: str, hard: dict[str, str], operator: str, classes: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta(state, name),
        "spec": {
            "hard": hard,
            "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": operator, "values": classes}]},
        },
    }


def render_limit_range(state: ProjectState, defaults: LimitDefaults) -> dict[str, Any]:
    """Default requests and limits, so pods that name none are admitted under the cpu/memory quota
    and run under cgroup limits, and a per-container maximum (:mod:`delivery.container_limits`)."""
    limits = container_limits(state.grants, request_cpu=defaults.cpu, request_memory=defaults.memory)
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": _meta(state, LIMIT_RANGE_NAME),
        "spec": {"limits": [limits.as_entry()]},
    }


def _role_binding(state: ProjectState, name: str, role: str, users: tuple[str, ...]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(state, name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user} for user in sorted(set(users))],
    }


def render_role_bindings(state: ProjectState) -> list[dict[str, Any]]:
    """Members edit, the department's admins and auditors view; a binding without users is not rendered."""
    bindings = []
    if state.editors:
        bindings.append(_role_binding(state, EDIT_BINDING, "edit", state.editors))
    if state.viewers:
        bindings.append(_role_binding(state, VIEW_BINDING, "view", state.viewers))
    return bindings


def render_network_policy(state: ProjectState) -> dict[str, Any]:
    """Ingress only from this namespace, from the same department's namespaces, and from namespaces
    the portal does not manage (ingress controllers, monitoring): never from another tenant's."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(state, NETWORK_POLICY_NAME),
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {"podSelector": {}},
                        {"namespaceSelector": {"matchLabels": {DEPARTMENT_LABEL: state.department}}},
                        {
                            "namespaceSelector": {
                                "matchExpressions": [
                                    {"key": MANAGED_BY_LABEL, "operator": "NotIn", "values": [MANAGED_BY_VALUE]}
                                ]
                            }
                        },
                    ]
                }
            ],
        },
    }


def render_idle_namespace(state: ProjectState) -> list[dict[str, Any]]:
    """What the retain-namespace policy keeps once nothing is granted: the Namespace, with a quota
    holding every GPU resource, and CPU and memory (requests and limits), at zero, so the namespace
    cannot take GPUs it no longer has, and no new container runs there without limits (there is no
    LimitRange to fill them in, so the quota refuses every pod). Running pods are not evicted for
    CPU or memory."""
    hard = {f"requests.{resource}": "0" for resource in sorted(set(state.idle_resources))} | IDLE_COMPUTE
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": _meta(state, QUOTA_NAME), "spec": {"hard": hard}}
    return [render_namespace(state), quota]


def render_project(
    state: ProjectState, *, limit_defaults: LimitDefaults | None = None, retain_namespace: bool = False
) -> list[dict[str, Any]]:
    """Every object the project needs on the cluster, Namespace first. Once nothing is granted:
    nothing (delete-namespace policy) or the idle namespace (retain-namespace policy)."""
    if state.is_empty:
        return render_idle_namespace(state) if retain_namespace else []
    return [
        render_namespace(state),
        render_resource_quota(state),
        *render_priority_quotas(state),
        render_limit_range(state, limit_defaults or LimitDefaults()),
        *render_role_bindings(state),
        render_network_policy(state),
    ]


# ---------------------------------------------------------------------------------- cluster-wide


@dataclass(frozen=True)
class PriorityClassSpec:
    name: str
    value: int
    preemption_policy: str
    description: str = ""


def render_priority_class(spec: PriorityClassSpec) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": spec.name, "labels": cluster_labels()},
        "value": spec.value,
        "preemptionPolicy": spec.preemption_policy,
    }
    if spec.description:
        body["description"] = spec.description
    return body


@dataclass(frozen=True)
class DepartmentQueue:
    """A department's GPUs on one cluster: ``granted`` is the sum of its holding allocations per
    resource, ``guaranteed`` its guaranteed quota per resource (flavor quotas summed)."""

    department: str
    granted: tuple[tuple[str, int], ...]
    guaranteed: tuple[tuple[str, int], ...] = ()


def queue_name(department: str) -> str:
    return f"{QUEUE_PREFIX}{department}"


def render_queue(queue: DepartmentQueue) -> dict[str, Any] | None:
    """A Volcano Queue with guarantee ≤ deserved ≤ capability for every resource (the webhook's
    rule): capability and deserved are what is granted, the guarantee is capped at it."""
    capability = {resource: count for resource, count in queue.granted if count > 0}
    if not capability:
        return None
    guarantee = {
        resource: min(count, capability[resource])
        for resource, count in queue.guaranteed
        if resource in capability and count > 0
    }
    spec: dict[str, Any] = {
        "weight": 1,
        "reclaimable": True,
        "capability": {resource: str(count) for resource, count in sorted(capability.items())},
        "deserved": {resource: str(count) for resource, count in sorted(capability.items())},
    }
    if guarantee:
        spec["guarantee"] = {"resource": {resource: str(count) for resource, count in sorted(guarantee.items())}}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": queue_name(queue.department), "labels": {**cluster_labels(), DEPARTMENT_LABEL: queue.department}},
        "spec": spec,
    }


def queue_violations(queue: dict[str, Any]) -> list[str]:
    """The Volcano admission webhook's refusals for a Queue's resources, in its own words."""
    spec = queue.get("spec", {})
    capability = {key: int(value) for key, value in spec.get("capability", {}).items()}
    deserved = {key: int(value) for key, value in spec.get("deserved", {}).items()}
    guarantee = {key: int(value) for key, value in spec.get("guarantee", {}).get("resource", {}).items()}
    problems = []
    for key, value in sorted(guarantee.items()):
        if deserved.get(key, 0) < value:
            problems.append(f"deserved[{key}] must be >= guarantee[{key}]={value}")
    for key, value in sorted(deserved.items()):
        if key in capability and value > capability[key]:
            problems.append(f"deserved[{key}]={value} must be <= capability[{key}]={capability[key]}")
    return problems

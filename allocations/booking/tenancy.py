"""Who may share a GPU or a node with whom (docs/sharing.md).

Two rules keep tenants apart when placement books units:

* **Per-tenant MPS.** The NVIDIA device plugin runs one MPS control daemon per node and resource
  (gpu-sharing-formats.md §1), so every MPS client of a node shares that daemon and its failure
  domain. A node that shares its GPUs through MPS therefore serves one department at a time: a
  unit goes only to an MPS node that holds no other department's units.
* **Dedicated pools.** A department (its whole subtree) or a project marked dedicated never shares
  a GPU (``dedicated-gpus``) or a node (``dedicated-nodes``) with a unit of anyone outside it, in
  any mode (MIG, MPS, time-slicing, vGPU, whole GPUs on a shared node). The rule binds both ways:
  a dedicated tenant does not go where others are, and others do not go where it is.

Placement applies them by leaving out of the engine's picture the GPUs and nodes a unit may not
use (``allocations.booking.view.placement_view``); the engine itself stays tenant-blind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from allocations.models import Allocation
from tenants.models import Department, Isolation, Project

GPU_LEVEL = "gpu"
NODE_LEVEL = "node"


@dataclass(frozen=True)
class Tenant:
    """A project as placement sees it: where it belongs and which pools it must keep to."""

    project_id: int
    department_id: int
    name: str
    department: str
    belongs: frozenset[str] = frozenset()
    """Pool keys this tenant is inside: ``p<project>`` and ``d<department>`` for its department
    and every ancestor."""
    rules: tuple[tuple[str, str], ...] = ()
    """(pool key, level): the tenant shares a GPU (level ``gpu``) or a node (``node``) only with
    tenants inside that pool."""

    @property
    def dedicated(self) -> bool:
        return bool(self.rules)


UNKNOWN_TENANT = Tenant(project_id=0, department_id=0, name="an unnamed project", department="")
"""A request whose project is not known yet (a preview): it can share with no dedicated pool and
no other department's MPS node."""


@dataclass
class DepartmentTree:
    """Every department's parent, isolation and slug (one query)."""

    rows: dict[int, tuple[int | None, str, str]] = field(default_factory=dict)

    @classmethod
    def load(cls) -> DepartmentTree:
        return cls({pk: (parent, isolation, slug) for pk, parent, isolation, slug in
                    Department.objects.values_list("pk", "parent_id", "isolation", "slug")})

    def chain(self, department_id: int) -> list[int]:
        out: list[int] = []
        current: int | None = department_id
        while current is not None and current in self.rows and current not in out:
            out.append(current)
            current = self.rows[current][0]
        return out


def _level(isolation: str) -> str | None:
    if isolation == Isolation.DEDICATED_NODES:
        return NODE_LEVEL
    if isolation == Isolation.DEDICATED_GPUS:
        return GPU_LEVEL
    return None


def tenant_build(
    *, project_id: int, slug: str, department_id: int, isolation: str, tree: DepartmentTree
) -> Tenant:
    belongs = {f"p{project_id}"}
    rules: list[tuple[str, str]] = []
    level = _level(isolation)
    if level is not None:
        rules.append((f"p{project_id}", level))
    for ancestor in tree.chain(department_id):
        belongs.add(f"d{ancestor}")
        level = _level(tree.rows[ancestor][1])
        if level is not None:
            rules.append((f"d{ancestor}", level))
    department = tree.rows.get(department_id, (None, "", ""))[2]
    return Tenant(project_id, department_id, slug, department, frozenset(belongs), tuple(rules))


def tenant_of(project: Project, *, tree: DepartmentTree | None = None) -> Tenant:
    tree = tree if tree is not None else DepartmentTree.load()
    return tenant_build(project_id=project.pk, slug=project.slug, department_id=project.department_id,
                        isolation=project.isolation, tree=tree)


def allocation_tenants(*, allocation_ids: Iterable[int], tree: DepartmentTree) -> dict[int, Tenant]:
    """Allocation id → its project's tenant (one query)."""
    ids = sorted(set(allocation_ids))
    if not ids:
        return {}
    out: dict[int, Tenant] = {}
    by_project: dict[int, Tenant] = {}
    for pk, project_id, slug, department_id, isolation in Allocation.objects.filter(pk__in=ids).values_list(
        "pk", "project_id", "project__slug", "project__department_id", "project__isolation"
    ):
        tenant = by_project.get(project_id)
        if tenant is None:
            tenant = by_project[project_id] = tenant_build(
                project_id=project_id, slug=slug, department_id=department_id, isolation=isolation, tree=tree
            )
        out[pk] = tenant
    return out


def project_tenants(*, project_ids: Iterable[int], tree: DepartmentTree) -> dict[int, Tenant]:
    """Project id → its tenant (one query)."""
    ids = sorted(set(project_ids))
    if not ids:
        return {}
    return {
        pk: tenant_build(project_id=pk, slug=slug, department_id=department_id, isolation=isolation, tree=tree)
        for pk, slug, department_id, isolation in Project.objects.filter(pk__in=ids).values_list(
            "pk", "slug", "department_id", "isolation"
        )
    }

def _applies(rule_level: str, level: str) -> bool:
    return rule_level == NODE_LEVEL or level == GPU_LEVEL


def apart(a: Tenant, b: Tenant, *, level: str) -> str | None:
    """Why units of ``a`` and ``b`` may not share a GPU (``level='gpu'``) or a node, or None."""
    if a.project_id and a.project_id == b.project_id:
        return None
    for one, other in ((a, b), (b, a)):
        for key, rule_level in one.rules:
            if _applies(rule_level, level) and key not in other.belongs:
                what = "project" if key.startswith("p") else "department"
                whose = one.name if key.startswith("p") else one.department
                return f"{what} {whose} is dedicated ({'nodes' if rule_level == NODE_LEVEL else 'GPUs'})"
    return None


@dataclass
class Exclusion:
    """GPUs and nodes a unit of one tenant may not use, with why (for the refusal's reason)."""

    nodes: dict[int, str] = field(default_factory=dict)
    gpus: dict[tuple[int, int], str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.nodes or self.gpus)


@dataclass(frozen=True)
class Holding:
    """Units one tenant holds on one node: on which GPUs."""

    node_id: int
    gpu_indices: tuple[int, ...]
    tenant: Tenant


def tenancy_exclusion(*, tenant: Tenant, holdings: Iterable[Holding], mps_node_ids: Mapping[int, bool]) -> Exclusion:
    """What ``tenant`` may not use given who holds what. ``mps_node_ids`` names the nodes that
    share their GPUs through MPS (one department per node)."""
    out = Exclusion()
    for holding in holdings:
        other = holding.tenant
        if holding.node_id in out.nodes:
            continue
        if mps_node_ids.get(holding.node_id) and other.department_id != tenant.department_id:
            out.nodes[holding.node_id] = f"its MPS daemon serves department {other.department or '?'}"
            continue
        why = apart(tenant, other, level=NODE_LEVEL)
        if why is not None:
            out.nodes[holding.node_id] = why
            continue
        why = apart(tenant, other, level=GPU_LEVEL)
        if why is not None:
            for index in holding.gpu_indices:
                out.gpus.setdefault((holding.node_id, int(index)), why)
    return out

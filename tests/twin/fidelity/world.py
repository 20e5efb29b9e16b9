"""The portal's rows for a twin's cluster and policy (``twin.clusters``, ``twin.policy``): one
organisation whose quota is the installed GPU-equivalents, one department per department of the
policy under its parent (the organisation where it names none; its guarantee and limit, in
GPU-equivalents), a project and a requester each, the
priority classes, the catalogue's flavors and one cluster with the nodes in the cluster's order;
with fair share, each department's shares; the quota windows (approved) and the idle policies.

The quota tree is the one the twin builds (``twin.replay.world.quota_tree``). A flavor of one whole
GPU is an exclusive flavor; a share below a GPU is a HAMi vGPU flavor of that share (the twin's
shares: any GPU, any mix of shares), with no CPU, memory or GPU memory asked per unit, as the
workload format asks none. A MIG instance's flavor is a MIG flavor of its profile weighing what the
twin weighs it; a node whose GPUs the twin holds in MIG mode is a MIG node (the mixed strategy) of
MIG-capable GPUs whose model the portal reads as the same geometry.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.contrib.auth.models import User

from accounting.idle_models import IdleAction, IdlePolicy
from allocations.booking.state import kept_states_forget
from allocations.models import FairShare, Flavor, PreemptionPolicy, PriorityClass, Quota, SharingMode
from allocations.models.windows import QuotaWindow, WindowState
from clusters.inventory import GpuSpec, node_upsert
from clusters.models import Cluster, NodeSharing
from clusters.models import Node as PortalNode
from placement import Node
from placement.mig import COMPUTE_SLICES, geometry_for_model, mig_compute
from tenants.models import Department, Membership, Project, Role
from tests.conftest import make_user
from twin.policy import Policy
from twin.workload import GPU_MILLI, Shape

GPU_MEMORY_MIB = 81920


@dataclass
class PortalWorld:
    departments: dict[str, Department]
    projects: dict[str, Project]
    requesters: dict[str, User]
    decider: User
    flavors: dict[str, Flavor]
    classes: dict[str, PriorityClass]
    cluster: Cluster
    fair_share: bool = False  # the departments' fair-share usage is ticked at every instant decided
    idle: bool = False  # grants are made active and the idle evaluation runs at its ticks


def _flavor(name: str, shape: Shape) -> Flavor:
    if shape.num_gpu != 1 or len(shape.models) != 1:
        raise ValueError(f"flavor {name}: the portal's units are one GPU of one model")
    if shape.mig_profile is not None:
        return _mig_flavor(name, shape)
    share = shape.gpu_milli < GPU_MILLI
    return Flavor.objects.create(
        name=name, display_name=name, gpu_model=next(iter(shape.models)),
        sharing_mode=SharingMode.VGPU if share else SharingMode.EXCLUSIVE,
        resource_name="nvidia.com/gpu", memory_mib=1 if share else GPU_MEMORY_MIB,
        compute_percent=max(1, shape.gpu_milli // 10), gpu_equivalents=Decimal(shape.gpu_milli) / GPU_MILLI,
        cpu_millicores_per_unit=0, memory_mib_per_unit=0, reserve_percent=0, reserve_per_unit_mib=0,
    )


def _mig_flavor(name: str, shape: Shape) -> Flavor:
    """A MIG flavor of the shape's profile, weighing what the twin weighs it (``twin.mig``)."""
    assert shape.mig_profile is not None
    compute = mig_compute(shape.mig_profile)
    return Flavor.objects.create(
        name=name, display_name=name, gpu_model=next(iter(shape.models)), sharing_mode=SharingMode.MIG,
        resource_name=f"nvidia.com/mig-{shape.mig_profile}", mig_profile=shape.mig_profile, memory_mib=1,
        compute_percent=compute * 100 // COMPUTE_SLICES, gpu_equivalents=shape.mig_weight,
        cpu_millicores_per_unit=0, memory_mib_per_unit=0,
    )


def _mig_node(cluster: Cluster, node: Node) -> None:
    """A node whose GPUs the twin holds in MIG mode: MIG-capable GPUs of the same geometry, the
    node under the mixed strategy (``NodeSharing.MIG``)."""
    for gpu in node.gpus:
        geometry = geometry_for_model(gpu.model, GPU_MEMORY_MIB)
        if geometry is None or geometry.name != gpu.mig_geometry:
            raise ValueError(f"node {node.name}: the portal reads {gpu.model} as {geometry and geometry.name}, "
                             f"the twin's cluster says {gpu.mig_geometry}")
    PortalNode.objects.filter(cluster=cluster, name=node.name).update(sharing=NodeSharing.MIG)


def _class(name: str, policy: Policy) -> PriorityClass:
    spec = policy.classes[name]
    return PriorityClass.objects.create(
        name=name, value=spec.value,
        preemption_policy=PreemptionPolicy.PREEMPT_LOWER_PRIORITY if spec.preempts_lower else PreemptionPolicy.NEVER,
        oversubscription_factor=spec.factor, notice_minutes=int(spec.notice_s // 60) or 15,
        preemptible=spec.notice_s == 0,
    )


def portal_world_build(policy: Policy, nodes: list[Node]) -> PortalWorld:
    """The rows on an empty database (see the module's docstring)."""
    installed = Decimal(sum(len(node.gpus) for node in nodes))
    root = Department.objects.create(slug="org", name="Organisation")
    Quota.objects.create(department=root, flavor=None, guaranteed=installed, limit=installed)
    decider = make_user("fidelity-admin")
    Membership.objects.create(user=decider, department=root, role=Role.PLATFORM_ADMIN)
    departments: dict[str, Department] = {}
    projects, requesters = {}, {}
    for spec in policy.departments:
        parent = departments[spec.parent] if spec.parent is not None else root  # the policy lists parents first
        department = Department.objects.create(slug=spec.name, name=spec.name, parent=parent)
        Quota.objects.create(department=department, flavor=None, guaranteed=spec.guarantee, limit=spec.limit)
        project = Project.objects.create(slug=f"{spec.name}-work", name=f"{spec.name} work", department=department)
        requester = make_user(f"{spec.name}-member")
        Membership.objects.create(user=requester, department=department, role=Role.RESEARCHER)
        project.members.add(requester)
        if policy.fair_share_half_life_s is not None:
            FairShare.objects.create(department=department, shares=spec.shares)
        departments[spec.name], projects[spec.name], requesters[spec.name] = department, project, requester
    flavors = {name: _flavor(name, shape) for name, shape in policy.flavors.items()}
    for spec in policy.departments:  # its flavors' quotas, in units of each
        for quota in spec.flavor_quotas:
            Quota.objects.create(department=departments[spec.name], flavor=flavors[quota.flavor],
                                 guaranteed=quota.guarantee, limit=quota.limit)
    classes = {name: _class(name, policy) for name in policy.classes}
    cluster = Cluster.objects.create(name="twin", use_hami=True)
    for node in nodes:
        node_upsert(actor=None, cluster=cluster, name=node.name, cpu_millicores=node.cpu_milli, memory_mib=node.memory_mib,
                    gpus=[GpuSpec(index=gpu.index, model=gpu.model, memory_mib=GPU_MEMORY_MIB,
                                  mig_capable=gpu.mig_geometry is not None) for gpu in node.gpus])
        if any(gpu.mig_geometry is not None for gpu in node.gpus):
            _mig_node(cluster, node)
    for window in policy.windows:  # approved, on the department's quota in GPU-equivalents (or a class's share)
        shape = window.spec
        QuotaWindow.objects.create(
            quota=Quota.objects.get(department=departments[window.department],
                                    flavor=flavors[window.flavor] if window.flavor is not None else None), kind=shape.kind,
            priority_class=classes[window.priority_class] if window.priority_class is not None else None,
            state=WindowState.APPROVED, begins_at=shape.begins_at, ends_at=shape.ends_at, rrule=shape.rrule,
            timezone=shape.timezone if shape.rrule else "", duration_minutes=int(shape.duration.total_seconds() // 60)
            if shape.duration else None, guaranteed_delta=shape.guaranteed_delta, limit_delta=shape.limit_delta,
            guaranteed=shape.guaranteed, limit=shape.limit, requested_by=decider, decided_by=decider,
            shrink_policy=window.shrink_policy,
        )
    for rule in policy.idle_policies:  # in their order: the newest last, as the twin numbers them
        IdlePolicy.objects.create(
            name=rule.name, department=departments[rule.department] if rule.department else None,
            priority_class=classes[rule.priority_class] if rule.priority_class else None,
            threshold=rule.threshold, window_minutes=rule.rules.window_minutes, grace_minutes=rule.rules.grace_minutes,
            action=IdleAction.RECLAIM if rule.action == "reclaim" else IdleAction.NOTIFY,
        )
    kept_states_forget()
    return PortalWorld(departments, projects, requesters, decider, flavors, classes, cluster,
                       policy.fair_share_half_life_s is not None, bool(policy.idle_policies))

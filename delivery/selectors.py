"""Reads of the inventory and of a project's desired state on a cluster."""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from allocations.catalogue.selectors import holding_with_live_units, live_reservations_on
from allocations.catalogue.states import ON_CLUSTER_STATES
from allocations.models import Allocation, AllocationState, Flavor, PriorityClass, Quota, SharingMode
from allocations.quotas.window_reading import approved_window_specs
from allocations.quotas.windows import effective
from clusters.mig_layout import layout_entries
from clusters.models import Cluster, ClusterPush, Gpu, Node, NodeSharing, PushState
from delivery import conf
from delivery.node_configs import BookedUnit, MigGroup, NodePlan, mig_groups_from_layouts, units_in_force
from delivery.rendering import DepartmentQueue, GrantedUnits, PriorityClassSpec, ProjectState
from delivery.volcano import vgpu_unit_resources
from kernel.clock import clock_now
from placement.mig import MigGeometry, geometry_for_model
from tenants.access import department_ancestor_ids, department_parent_map
from tenants.models import Membership, Project, Role

HAMI_RESOURCE = "nvidia.com/gpu"


# ------------------------------------------------------------------------ desired state


def _grant(allocation: Allocation, *, hami: bool) -> GrantedUnits:
    flavor = allocation.flavor
    hami_memory = hami_cores = 0
    if hami and flavor.resource_name == HAMI_RESOURCE:
        # HAMi counts an exclusive card (its webhook injects gpucores: 100) as well as a vGPU.
        hami_memory = flavor.memory_mib
        hami_cores = flavor.compute_percent if flavor.sharing_mode == SharingMode.VGPU else 100
    return GrantedUnits(
        resource_name=flavor.resource_name,
        quantity=allocation.quantity,
        cpu_millicores_per_unit=flavor.cpu_millicores_per_unit,
        memory_mib_per_unit=flavor.memory_mib_per_unit,
        priority_class=allocation.priority_class.name,
        hami_memory_mib=hami_memory,
        hami_cores=hami_cores,
        extra_requests=_volcano_extras(flavor.sharing_mode, flavor.memory_mib, flavor.compute_percent),
    )


def granted_units(allocation: Allocation, *, hami: bool) -> GrantedUnits:
    """What one allocation contributes to its project's desired state (also the usage guide's input)."""
    return _grant(allocation, hami=hami)


def _volcano_extras(mode: str, memory_mib: int, cores: int) -> tuple[tuple[str, int], ...]:
    """A Volcano vGPU unit's memory and cores (per unit), for its quota and its Queue."""
    return vgpu_unit_resources(memory_mib=memory_mib, cores=cores) if mode == SharingMode.VOLCANO_VGPU else ()


def volcano_vgpu_policies() -> list[str]:
    """The placement policy of each active Volcano vGPU flavor (the scheduler configuration's input)."""
    return list(
        Flavor.objects.filter(is_active=True, sharing_mode=SharingMode.VOLCANO_VGPU)
        .order_by("name").values_list("placement_policy", flat=True)
    )


# Requests and bookings that have not reached the cluster (or never will): no namespace for them.
NOT_ON_CLUSTER_YET = (AllocationState.PENDING, AllocationState.SCHEDULED, AllocationState.REJECTED, AllocationState.CANCELLED)


def cluster_project_ids(*, cluster: Cluster, among: Iterable[int] | None = None) -> list[int]:
    """Projects (of ``among``, if given) that hold, or ever held, an allocation on the cluster:
    their namespaces are the portal's to create and to prune. A project with only a scheduled
    booking is not one of them yet (the retain-namespace policy would otherwise create its idle
    namespace before the start)."""
    rows = Allocation.objects.filter(cluster=cluster).exclude(state__in=NOT_ON_CLUSTER_YET)
    if among is not None:
        rows = rows.filter(project_id__in=list(among))
    return sorted(set(rows.values_list("project_id", flat=True)))


def project_bookings(*, cluster: Cluster, project_ids: Iterable[int]) -> dict[int, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Project id → (the nodes its live bookings are on, and on a HAMi cluster the UUIDs of the
    GPUs booked whole or shared on exclusive nodes), sorted; two queries. The GPUs are left out
    (no GPU pinning, only nodes) when one of them has no UUID in the inventory."""
    rows = list(
        live_reservations_on(cluster=cluster)
        .filter(allocation__project_id__in=list(project_ids), allocation__state__in=ON_CLUSTER_STATES)
        .values_list("allocation__project_id", "node_id", "node__name", "node__sharing", "gpu_indices", "mig_profile")
    )
    nodes: dict[int, set[str]] = defaultdict(set)
    wanted: dict[int, set[tuple[int, int]]] = defaultdict(set)
    for project_id, node_id, name, sharing, indices, profile in rows:
        nodes[project_id].add(name)
        if cluster.use_hami and sharing == NodeSharing.EXCLUSIVE and not profile:
            wanted[project_id].update((node_id, int(index)) for index in indices)
    uuids: dict[tuple[int, int], str] = {}
    if wanted:
        node_ids = {node_id for keys in wanted.values() for node_id, _ in keys}
        uuids = {(node_id, index): uuid for node_id, index, uuid in
                 Gpu.objects.filter(node_id__in=node_ids).values_list("node_id", "index", "uuid")}
    out = {}
    for project_id, names in nodes.items():
        found = [uuids.get(key, "") for key in wanted.get(project_id, ())]
        gpus = tuple(sorted(set(found))) if found and all(found) else ()
        out[project_id] = (tuple(sorted(names)), gpus)
    return out


def node_pools(*, cluster: Cluster, node_ids: Iterable[int] | None = None) -> dict[int, tuple[tuple[str, ...], str]]:
    """Node id → (the namespaces of the projects with live bookings on it, and the department its
    MPS daemon serves: an MPS node holding bookings serves one department), one query."""
    rows = live_reservations_on(cluster=cluster, node_ids=node_ids).filter(allocation__state__in=ON_CLUSTER_STATES)
    pools: dict[int, set[str]] = defaultdict(set)
    tenants: dict[int, str] = {}
    for node_id, sharing, project, department in rows.order_by("pk").values_list(
        "node_id", "node__sharing", "allocation__project__slug", "allocation__project__department__slug"
    ):
        pools[node_id].add(project)
        if sharing == NodeSharing.MPS:
            tenants.setdefault(node_id, department)
    return {node_id: (tuple(sorted(names)), tenants.get(node_id, "")) for node_id, names in pools.items()}


def project_states_on_cluster(*, cluster: Cluster, project_ids: Iterable[int]) -> list[ProjectState]:
    """Desired state of several projects at once, in a fixed number of queries."""
    ids = sorted(set(project_ids))
    projects = list(Project.objects.filter(pk__in=ids).select_related("department").order_by("pk"))
    grants: dict[int, list[GrantedUnits]] = defaultdict(list)
    holding = (
        Allocation.objects.filter(cluster=cluster, project_id__in=ids, state__in=ON_CLUSTER_STATES)
        .select_related("flavor", "priority_class")
        .order_by("pk")
    )
    for allocation in holding:
        grants[allocation.project_id].append(_grant(allocation, hami=cluster.use_hami))
    prefix = conf.kube_user_prefix()
    editors: dict[int, set[str]] = defaultdict(set)
    for project_id, username in Project.members.through.objects.filter(project_id__in=ids).values_list(
        "project_id", "user__username"
    ):
        editors[project_id].add(prefix + username)
    parents = department_parent_map()
    watchers: dict[int, set[str]] = defaultdict(set)
    for department_id, username in Membership.objects.filter(role__in=[Role.DEPARTMENT_ADMIN, Role.AUDITOR]).values_list(
        "department_id", "user__username"
    ):
        watchers[department_id].add(prefix + username)
    idle = tuple(sorted(set(Flavor.objects.values_list("resource_name", flat=True))))
    bookings = project_bookings(cluster=cluster, project_ids=ids)
    states = []
    for project in projects:
        booked_nodes, booked_gpus = bookings.get(project.pk, ((), ()))
        chain = department_ancestor_ids(department_id=project.department_id, parents=parents)
        viewers = {user for department_id in chain for user in watchers[department_id]} - editors[project.pk]
        states.append(
            ProjectState(
                cluster=cluster.name,
                namespace=project.slug,
                department=project.department.slug,
                project=project.slug,
                grants=tuple(grants[project.pk]),
                editors=tuple(sorted(editors[project.pk])),
                viewers=tuple(sorted(viewers)),
                idle_resources=idle,
                booked_nodes=booked_nodes,
                booked_gpus=booked_gpus,
                pinned=cluster.pin_bookings,
            )
        )
    return states


def priority_class_specs() -> list[PriorityClassSpec]:
    return [
        PriorityClassSpec(name=pc.name, value=pc.value, preemption_policy=pc.preemption_policy, description=pc.description)
        for pc in PriorityClass.objects.order_by("name")
    ]


def department_queues(*, cluster: Cluster) -> list[DepartmentQueue]:
    granted: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    department_ids: dict[str, int] = {}
    for department_id, slug, resource, quantity, mode, memory, cores in Allocation.objects.filter(
        cluster=cluster, state__in=ON_CLUSTER_STATES
    ).values_list("project__department_id", "project__department__slug", "flavor__resource_name", "quantity",
                  "flavor__sharing_mode", "flavor__memory_mib", "flavor__compute_percent"):
        granted[slug][resource] += quantity
        for name, per_unit in _volcano_extras(mode, memory, cores):
            granted[slug][name] += quantity * per_unit
        department_ids[slug] = department_id
    guaranteed: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    specs, now = (approved_window_specs() if department_ids else {}), clock_now()  # the guarantee in force now
    for quota_id, department_id, resource, amount, most, mode, memory, cores in Quota.objects.filter(
        department_id__in=department_ids.values(), flavor__isnull=False
    ).values_list("pk", "department_id", "flavor__resource_name", "guaranteed", "limit",
                  "flavor__sharing_mode", "flavor__memory_mib", "flavor__compute_percent"):
        if specs.get(quota_id):
            amount = effective(guaranteed=amount, limit=most, windows=specs[quota_id], at=now).guaranteed
        guaranteed[department_id][resource] += int(amount)
        for name, per_unit in _volcano_extras(mode, memory, cores):
            guaranteed[department_id][name] += int(amount) * per_unit
    return [
        DepartmentQueue(
            department=slug,
            granted=tuple(sorted(resources.items())),
            guaranteed=tuple(sorted(guaranteed[department_ids[slug]].items())),
        )
        for slug, resources in sorted(granted.items())
    ]


def mig_demand(*, cluster: Cluster) -> dict[str, dict[str, int]]:
    """MIG instances that allocations on the cluster need and no reservation books yet (units
    granted before GPU placement existed): GPU model → profile → count. A scheduled grant's are
    carved when it starts, as its booked ones are (``booked_gpu_layouts``)."""
    demand: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for model, profile, quantity, booked in (
        holding_with_live_units(cluster_ids=[cluster.pk])
        .filter(flavor__sharing_mode=SharingMode.MIG, state__in=ON_CLUSTER_STATES)
        .values_list("flavor__gpu_model", "flavor__mig_profile", "quantity", "live_units")
    ):
        if quantity > booked:
            demand[model][profile] += quantity - booked
    return {model: dict(profiles) for model, profiles in demand.items()}


def booked_gpu_layouts(
    *, cluster: Cluster, node_ids: Iterable[int] | None = None, at: datetime.datetime | None = None
) -> dict[int, tuple[dict[int, dict[str, int]], set[int]]]:
    """Per node id: the MIG instances the grants on the cluster hold at ``at`` (now by default) on
    each GPU (index → profile → count), and the GPUs booked whole or shared (not carved).

    A grant on the cluster whose interval does not hold ``at`` (past its end, its expiry not run
    yet) keeps its units only where they fit beside those in force: the next grant booked on the
    same slices may already have started (``delivery.node_configs.units_in_force``). A scheduled
    grant is not on the cluster: its units are carved when the timeline starts it, which pushes
    the layout again."""
    moment = at or clock_now()
    rows = live_reservations_on(cluster=cluster, node_ids=node_ids).filter(allocation__state__in=ON_CLUSTER_STATES)
    units = [
        BookedUnit(node_id=node_id, gpu_indices=tuple(int(index) for index in indices), mig_profile=profile,
                   mig_start=start, in_force=begins <= moment < ends)
        for node_id, indices, profile, start, begins, ends in rows.order_by("allocation__starts_at", "pk").values_list(
            "node_id", "gpu_indices", "mig_profile", "mig_start", "allocation__starts_at", "allocation__ends_at"
        )
    ]
    out: dict[int, tuple[dict[int, dict[str, int]], set[int]]] = defaultdict(lambda: (defaultdict(dict), set()))
    for unit in units_in_force(units, _gpu_geometries(units)):
        carved, uncarved = out[unit.node_id]
        for index in unit.gpu_indices:
            if unit.mig_profile:
                carved[index][unit.mig_profile] = carved[index].get(unit.mig_profile, 0) + 1
            else:
                uncarved.add(index)
    return dict(out)


def _gpu_geometries(units: list[BookedUnit]) -> dict[tuple[int, int], MigGeometry]:
    """(node id, GPU index) → MIG geometry of the GPUs under units not in force; one query, none
    when every unit is in force."""
    nodes = {unit.node_id for unit in units if not unit.in_force}
    if not nodes:
        return {}
    out = {}
    for node_id, index, model, memory in Gpu.objects.filter(node_id__in=nodes).values_list(
        "node_id", "index", "model", "memory_mib"
    ):
        if (geometry := geometry_for_model(model, memory)) is not None:
            out[(node_id, index)] = geometry
    return out


def _compute_capability(labels: dict[str, str]) -> tuple[int, int] | None:
    try:
        return int(labels["nvidia.com/gpu.compute.major"]), int(labels["nvidia.com/gpu.compute.minor"])
    except (KeyError, ValueError):
        return None


def _mig_groups(layout: list[dict[str, Any]], gpu_count: int) -> tuple[MigGroup, ...]:
    """``Node.mig_layout`` (mig-parted entries, as validated by ``Node.clean``) as MigGroups."""
    return tuple(MigGroup(entry.devices, tuple(sorted(entry.profiles.items())))
                 for entry in layout_entries(layout, range(gpu_count)))


def node_plans(*, cluster: Cluster, node_ids: Iterable[int] | None = None) -> list[NodePlan]:
    """Each GPU node's configuration (of ``node_ids`` only, when given). A MIG node's layout is
    the one pinned in ``Node.mig_layout`` or else the one its reservations book (the placement
    engine's choice)."""
    booked = booked_gpu_layouts(cluster=cluster, node_ids=node_ids)
    pools = node_pools(cluster=cluster, node_ids=node_ids)
    nodes = Node.objects.filter(cluster=cluster)
    if node_ids is not None:
        nodes = nodes.filter(pk__in=list(node_ids))
    # Plain rows, not model instances: at thousands of nodes (eight GPUs each) building the
    # instances cost more than everything else a push of an unchanged cluster does.
    gpus: dict[int, list[tuple[str, int, bool]]] = defaultdict(list)
    for node_id, model, memory, mig_capable in (
        Gpu.objects.filter(node__in=nodes).order_by("node_id", "index").values_list("node_id", "model", "memory_mib", "mig_capable")
    ):
        gpus[node_id].append((model, memory, mig_capable))
    plans = []
    for row in nodes.order_by("name").values_list("pk", "name", "sharing", "sharing_replicas", "labels", "mig_layout"):
        if row[0] in gpus:
            plans.append(_node_plan(cluster, row, gpus[row[0]], booked=booked, pools=pools))
    return plans


def _node_plan(
    cluster: Cluster, row: tuple[Any, ...], gpus: list[tuple[str, int, bool]], *,
    booked: dict[int, tuple[dict[int, dict[str, int]], set[int]]], pools: dict[int, tuple[tuple[str, ...], str]],
) -> NodePlan:
    """One node's plan from its row (pk, name, sharing, replicas, labels, pinned MIG layout) and
    its GPUs (model, memory, MIG-capable) in index order."""
    node_id, name, sharing, replicas, labels, mig_layout = row
    carved, uncarved = booked.get(node_id, ({}, set()))
    namespaces, mps_tenant = pools.get(node_id, ((), ""))
    # A GPU that left the inventory while booked is not rendered (its reservation stays until
    # it is released): one missing card must not stop the whole cluster's configuration.
    present = set(range(len(gpus)))
    carved = {index: layout for index, layout in carved.items() if index in present}
    booked_groups = mig_groups_from_layouts(carved) if sharing == NodeSharing.MIG else ()
    whole = tuple(sorted(uncarved & present)) if sharing == NodeSharing.MIG and not mig_layout else ()
    model, memory, _ = gpus[0]
    return NodePlan(
        name=name,
        gpu_model=model,
        gpu_count=len(gpus),
        gpu_memory_mib=memory,
        mig_capable=any(capable for _, _, capable in gpus),
        sharing=sharing,
        replicas=replicas,
        compute_capability=_compute_capability(labels or {}),
        mig_groups=_mig_groups(mig_layout or [], len(gpus)) if mig_layout else booked_groups,
        whole_gpus=whole,
        pools=namespaces if cluster.pin_bookings else (),
        mps_tenant=mps_tenant,
    )


def pending_push_project_ids(*, cluster: Cluster) -> set[int | None]:
    """Scopes with a push still to do: their difference from the cluster is not drift."""
    return set(ClusterPush.objects.filter(cluster=cluster, state=PushState.PENDING).values_list("project_id", flat=True))

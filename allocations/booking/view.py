"""The database inventory as the placement engine sees it, for one flavor on one cluster.

A node offers a flavor only in the sharing mode the NVIDIA device plugin is configured for on
that node (``Node.sharing``, see gpu-sharing-formats.md §1):

* ``exclusive`` nodes offer whole GPUs, and HAMi vGPU shares when the cluster runs HAMi;
* ``mps`` / ``timeslice`` nodes offer replicas of their own size only (a 4-replica flavor on
  4-replica nodes); one unit is ``1000 // replicas`` thousandths of a GPU;
* ``mig`` nodes run the mixed strategy: each GPU is either carved into MIG instances or offered
  whole with MIG off. An empty MIG-capable GPU becomes whichever the first reservation on it
  needs, so it is shown to the engine in the mode of the request being placed, unless the
  caller asks to see only what is carved already (``open_empty_gpus=False``; placement tries
  that first for a MIG unit, see ``allocations.booking.attempts.placement_attempt``).

A node with a layout pinned by an administrator (``Node.mig_layout``) keeps exactly that layout:
its instances are claimed one by one (:func:`pinned_free_instances`), never re-planned, and its
GPUs take nothing else.

Nodes whose CPU or memory is unknown (0 in the inventory) are not limited by it.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from allocations.booking.tenancy import Exclusion
from allocations.booking.usage import GpuUse, Usage, reservation_usage, with_spans
from allocations.catalogue.selectors import live_reservations_on
from allocations.models import Flavor, Reservation, SharingMode
from allocations.models.versions import Minimums
from clusters.mig_layout import layout_entries
from clusters.models import Cluster, Gpu, Node, NodeSharing
from placement import Cluster as EngineCluster
from placement import Gpu as EngineGpu
from placement import MigSlice, Request
from placement import Node as EngineNode
from placement.held import held_gpu, instances_problem
from placement.mig import MigGeometry, geometry_for_model, mig_layout_starts

GPU_MILLI = 1000
UNKNOWN_CAPACITY = 1 << 40
"""Stands in for a node's CPU (millicores) or memory (MiB) when the inventory does not know it."""
PINNED_POLICY = "pinned-layout"
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class UnitShape:
    """What one unit of a flavor needs of a node and of one GPU."""

    gpu_model: str
    gpu_milli: int  # per GPU; 0 for a MIG instance
    mig_profile: str | None
    cpu_millicores: int
    memory_mib: int
    sharing: str  # the node sharing mode that offers it (vGPU: exclusive on a HAMi cluster)
    replicas: int | None = None
    needs_hami: bool = False
    needs_volcano: bool = False  # a Volcano vGPU share: exclusive nodes of a cluster running Volcano
    min_driver_version: str = ""  # the flavor's minimums: a node must report these or newer
    min_cuda_version: str = ""

    @property
    def minimums(self) -> Minimums:
        return Minimums(self.min_driver_version, self.min_cuda_version)

    def request(self, *, name: str = "") -> Request:
        return Request(
            cpu_milli=self.cpu_millicores,
            memory_mib=self.memory_mib,
            gpu_count=1,
            gpu_milli=self.gpu_milli or GPU_MILLI,
            mig_profile=self.mig_profile,
            allowed_models=frozenset({self.gpu_model}),
            name=name,
        )

    def describe(self) -> str:
        if self.mig_profile:
            return f"{self.gpu_model} MIG {self.mig_profile} instances"
        if self.sharing in (NodeSharing.MPS, NodeSharing.TIMESLICE):
            return f"{self.gpu_model} {self.sharing} replicas ({self.replicas} per GPU)"
        if self.needs_hami:
            return f"{self.gpu_model} HAMi vGPU shares"
        if self.needs_volcano:
            return f"{self.gpu_model} Volcano vGPU shares"
        return f"whole {self.gpu_model} GPUs"


def unit_shape(flavor: Flavor) -> UnitShape:
    shape = _mode_shape(flavor)
    return replace(shape, min_driver_version=flavor.min_driver_version, min_cuda_version=flavor.min_cuda_version)


def _mode_shape(flavor: Flavor) -> UnitShape:
    mode = flavor.sharing_mode
    model, cpu, memory = flavor.gpu_model, flavor.cpu_millicores_per_unit, flavor.memory_mib_per_unit
    if mode == SharingMode.MIG:
        return UnitShape(model, 0, flavor.mig_profile, cpu, memory, NodeSharing.MIG)
    if mode in (SharingMode.MPS, SharingMode.TIMESLICE):
        replicas = int(flavor.replicas or 1)
        return UnitShape(model, GPU_MILLI // replicas, None, cpu, memory, mode, replicas=replicas)
    if mode in (SharingMode.VGPU, SharingMode.VOLCANO_VGPU):
        share = max(1, min(GPU_MILLI, int((flavor.gpu_equivalents * GPU_MILLI).to_integral_value())))
        volcano = mode == SharingMode.VOLCANO_VGPU
        return UnitShape(model, share, None, cpu, memory, NodeSharing.EXCLUSIVE, needs_hami=not volcano,
                         needs_volcano=volcano)
    return UnitShape(model, GPU_MILLI, None, cpu, memory, NodeSharing.EXCLUSIVE)


def node_offers(*, node: Node, shape: UnitShape, cluster: Cluster) -> bool:
    """Whether the node's device-plugin configuration can hand out units of this shape."""
    if not node.is_schedulable or not shape.minimums.met_by_node(node):
        return False
    if shape.needs_hami:
        return cluster.use_hami and node.sharing == NodeSharing.EXCLUSIVE
    if shape.needs_volcano:
        return cluster.use_volcano and node.sharing == NodeSharing.EXCLUSIVE
    if node.mig_layout:
        return False  # a pinned layout: its instances are claimed, see pinned_free_instances
    if shape.mig_profile is not None:
        return node.sharing == NodeSharing.MIG
    if shape.sharing in (NodeSharing.MPS, NodeSharing.TIMESLICE):
        return node.sharing == shape.sharing and node.sharing_replicas == shape.replicas
    return node.sharing in (NodeSharing.EXCLUSIVE, NodeSharing.MIG)


def gpu_label(gpu_indices: Iterable[int], mig_profile: str | None, mig_start: int | None) -> str:
    """``gpu3``, ``gpu0+1`` for a unit spanning GPUs, ``gpu2@4`` for a MIG instance at slice 4."""
    gpus = "+".join(str(index) for index in gpu_indices)
    return f"gpu{gpus}@{mig_start}" if mig_profile and mig_start is not None else f"gpu{gpus}"


def _capacity(value: int) -> int:
    return int(value) if value > 0 else UNKNOWN_CAPACITY


def _engine_gpu(gpu: GpuRow, use: GpuUse, *, mig_mode_when_empty: bool, node: str) -> EngineGpu:
    if not use.milli and not use.slices:
        return _empty_engine_gpu(gpu, mig_mode_when_empty)
    geometry = geometry_for_model(gpu.model, gpu.memory_mib) if gpu.mig_capable else None
    exist = None
    if geometry is not None and use.slices and not use.milli:
        exist = _instances_fit(geometry, use.slices, gpu=gpu, node=node)
    return held_gpu(EngineGpu(gpu.index, gpu.model, gpu.memory_mib), geometry=geometry, milli=use.milli,
                    slices=use.slices, mig_mode_when_empty=mig_mode_when_empty, instances_exist=exist)


def _instances_fit(geometry: MigGeometry, slices: list[MigSlice], *, gpu: GpuRow, node: str) -> bool:
    """Whether the MIG instances booked on the GPU can exist as booked (none of them on a memory
    slice another holds at the same instant, every profile one this GPU knows). Otherwise the
    GPU is shown full, so nothing more is booked there, and the double booking is logged."""
    problem = instances_problem(geometry, slices)
    if problem is not None:
        logger.error("MIG instances booked on %s gpu%s cannot exist as booked (%s): the GPU is shown full",
                     node, gpu.index, problem)
        return False
    return True


@functools.lru_cache(maxsize=4096)
def _empty_engine_gpu(gpu: GpuRow, mig_mode_when_empty: bool) -> EngineGpu:
    """A GPU nothing is booked on (most of a large cluster's): one immutable value per kind."""
    geometry = geometry_for_model(gpu.model, gpu.memory_mib) if gpu.mig_capable else None
    if mig_mode_when_empty and geometry is not None:
        return EngineGpu(gpu.index, gpu.model, gpu.memory_mib, 0, geometry.name)
    return EngineGpu(gpu.index, gpu.model, gpu.memory_mib, 0)


@dataclass(frozen=True)
class GpuRow:
    index: int
    model: str
    memory_mib: int
    mig_capable: bool


@dataclass(frozen=True)
class NodeRow:
    """A node with its GPUs in index order, read as plain rows (a view is rebuilt per approval)."""

    node: Node
    gpus: tuple[GpuRow, ...]
    pk: int = field(default=0, compare=False)
    """The node's id, as a plain attribute (read in loops over thousands of nodes)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "pk", self.node.pk)


def node_rows(cluster: Cluster, *, gpu_model: str | None = None) -> list[NodeRow]:
    """The cluster's nodes (those with a GPU of ``gpu_model``, when given) and all their GPUs, in
    two queries, without a model instance per GPU."""
    nodes = Node.objects.filter(cluster=cluster)
    if gpu_model is not None:
        nodes = nodes.filter(pk__in=Gpu.objects.filter(node__cluster=cluster, model=gpu_model).values("node_id"))
    gpus: dict[int, list[GpuRow]] = defaultdict(list)
    for node_id, index, model, memory, capable in (
        Gpu.objects.filter(node__in=nodes.values("pk"))
        .order_by("node_id", "index")
        .values_list("node_id", "index", "model", "memory_mib", "mig_capable")
    ):
        gpus[node_id].append(GpuRow(index, model, memory, capable))
    ordered = nodes.defer("labels", "created_at", "updated_at").order_by("name")
    return [NodeRow(node, tuple(gpus.get(node.pk, ()))) for node in ordered]


def engine_node(
    *, row: NodeRow, per_gpu: Mapping[tuple[int, int], GpuUse], cpu: Mapping[int, int], memory: Mapping[int, int],
    carve_empty: bool, exclusion: Exclusion,
) -> EngineNode:
    """One offering node as the engine sees it, its usage included. A node the tenant may not use
    stays in the picture without GPUs (nothing can go there), so the engine's rows do not depend
    on the tenant; a GPU it may not use is left out."""
    node = row.node
    cpu_cap, memory_cap = _capacity(node.cpu_millicores), _capacity(node.memory_mib)
    if node.pk in exclusion.nodes:
        return EngineNode(name=node.name, cpu_milli=cpu_cap, memory_mib=memory_cap)
    return EngineNode(
        name=node.name,
        cpu_milli=cpu_cap,
        memory_mib=memory_cap,
        gpus=tuple(
            _engine_gpu(gpu, per_gpu.get((node.pk, gpu.index), GpuUse()), mig_mode_when_empty=carve_empty,
                        node=node.name)
            for gpu in row.gpus if (node.pk, gpu.index) not in exclusion.gpus
        ),
        cpu_used_milli=min(cpu.get(node.pk, 0), cpu_cap),
        memory_used_mib=min(memory.get(node.pk, 0), memory_cap),
    )


@dataclass
class PlacementView:
    """One cluster's nodes that offer a shape, loaded as an engine cluster, plus the pinned
    MIG instances still free. ``engine`` is None when no node offers the shape dynamically."""

    cluster: Cluster
    shape: UnitShape
    nodes: dict[str, Node]
    engine: EngineCluster | None
    pinned_free: list[tuple[Node, int, int]]  # (node, GPU index, start) of free pinned instances
    pinned_room: dict[str, list[int]]  # pinned node name → [free millicores, free MiB]
    left_out: dict[str, str] = field(default_factory=dict)  # node name → why the tenant may not use it

    @property
    def offered(self) -> bool:
        return self.engine is not None or bool(self.pinned_free)


@dataclass(frozen=True)
class ViewRows:
    """The nodes of a cluster that take part in a picture for one shape: those the engine places
    on, and those whose pinned MIG instances are claimed one by one."""

    offering: list[NodeRow]
    pinned: list[NodeRow]


def view_rows(*, cluster: Cluster, shape: UnitShape, nodes: list[NodeRow]) -> ViewRows:
    rows = [row for row in nodes if any(gpu.model == shape.gpu_model for gpu in row.gpus)]
    return ViewRows(
        offering=[row for row in rows if node_offers(node=row.node, shape=shape, cluster=cluster)],
        pinned=[
            row for row in rows
            if shape.mig_profile and row.node.is_schedulable and row.node.sharing == NodeSharing.MIG
            and row.node.mig_layout and shape.minimums.met_by_node(row.node)
        ],
    )


def placement_view(
    *,
    cluster: Cluster,
    shape: UnitShape,
    nodes: list[NodeRow] | None = None,
    reservations: list[Reservation] | None = None,
    open_empty_gpus: bool | None = None,
    exclusion: Exclusion | None = None,
) -> PlacementView:
    """Build the engine's picture of ``cluster`` for units of ``shape`` from the live reservations
    (or from ``reservations``, e.g. a defragmentation plan's hypothetical set). Only nodes with
    a GPU of the shape's model take part. ``open_empty_gpus`` (default: for MIG shapes) shows the
    empty MIG-capable GPUs of mixed-strategy nodes in MIG mode, ready to be carved; otherwise
    they are whole GPUs. ``exclusion`` leaves out the nodes and GPUs the requesting tenant may
    not use (``allocations.booking.tenancy``). Built from scratch: the kept state of
    ``allocations.booking.state`` gives the same picture from what changed."""
    excluded = exclusion if exclusion is not None else Exclusion()
    carve_empty = shape.mig_profile is not None if open_empty_gpus is None else open_empty_gpus
    rows = view_rows(cluster=cluster, shape=shape,
                     nodes=node_rows(cluster, gpu_model=shape.gpu_model) if nodes is None else nodes)
    node_ids = {row.pk for row in rows.offering + rows.pinned if row.pk not in excluded.nodes}
    if reservations is None:
        reservations = list(with_spans(live_reservations_on(node_ids=node_ids)).order_by("pk"))
    usage = reservation_usage(row for row in reservations if row.node_id in node_ids)
    per_gpu, cpu, memory = usage
    engine = None
    if any(row.pk not in excluded.nodes for row in rows.offering):
        engine = EngineCluster([
            engine_node(row=row, per_gpu=per_gpu, cpu=cpu, memory=memory, carve_empty=carve_empty, exclusion=excluded)
            for row in rows.offering
        ])
    return view_finish(cluster=cluster, shape=shape, rows=rows, exclusion=excluded, usage=usage, engine=engine)


def view_finish(
    *, cluster: Cluster, shape: UnitShape, rows: ViewRows, exclusion: Exclusion, usage: Usage,
    engine: EngineCluster | None, nodes: dict[str, Node] | None = None,
) -> PlacementView:
    """The picture around an engine: the nodes by name (``nodes``, every row's, when the caller has
    them: shared, never changed), the free pinned instances (from ``usage``, which must cover the
    pinned nodes) and what the tenant may not use."""
    per_gpu, cpu, memory = usage
    left_out = {row.node.name: exclusion.nodes[row.pk] for row in rows.offering + rows.pinned
                if row.pk in exclusion.nodes} if exclusion.nodes else {}
    offering = [row for row in rows.offering if row.pk not in exclusion.nodes] if exclusion.nodes else rows.offering
    pinned = [row for row in rows.pinned if row.pk not in exclusion.nodes] if exclusion.nodes else rows.pinned
    pinned_free: list[tuple[Node, int, int]] = []
    pinned_room: dict[str, list[int]] = {}
    for row in pinned:
        node = row.node
        pinned_room[node.name] = [_capacity(node.cpu_millicores) - cpu[node.pk], _capacity(node.memory_mib) - memory[node.pk]]
        for gpu in row.gpus:
            if gpu.model != shape.gpu_model or (node.pk, gpu.index) in exclusion.gpus:
                continue
            taken = per_gpu.get((node.pk, gpu.index), GpuUse())
            starts = pinned_free_instances(
                node=node, gpu=gpu, gpu_count=len(row.gpus), profile=str(shape.mig_profile), taken=taken
            )
            pinned_free.extend((node, gpu.index, start) for start in starts)
    return PlacementView(
        cluster=cluster,
        shape=shape,
        nodes=nodes if nodes is not None and not exclusion.nodes else {row.node.name: row.node for row in offering + pinned},
        engine=engine if offering else None,
        pinned_free=pinned_free,
        pinned_room=pinned_room,
        left_out=left_out,
    )


def engine_nodes_replace(
    engine: EngineCluster, *, rows: Iterable[NodeRow], usage: Usage, carve_empty: bool, exclusion: Exclusion
) -> bool:
    """Rebuild ``rows`` (nodes of ``engine``) in place from ``usage`` (covering every row on them);
    False when the engine cannot take one in place (build the picture again then)."""
    per_gpu, cpu, memory = usage
    for row in rows:
        if row.node.name not in engine.index:
            return False
        rebuilt = engine_node(row=row, per_gpu=per_gpu, cpu=cpu, memory=memory, carve_empty=carve_empty,
                              exclusion=exclusion)
        if not engine.node_replace(engine.index[row.node.name], rebuilt):
            return False
    return True


def view_node_rebuild(
    view: PlacementView, *, row: NodeRow, reservations: list[Reservation], carve_empty: bool, exclusion: Exclusion
) -> bool:
    """Rebuild one node of ``view``'s engine from ``reservations`` (every row on it); False when
    the engine cannot take it in place (build the picture again then)."""
    return view.engine is not None and engine_nodes_replace(
        view.engine, rows=[row], usage=reservation_usage(reservations), carve_empty=carve_empty, exclusion=exclusion
    )


def pinned_layout(*, node: Node, gpu_index: int, gpu_count: int) -> Counter[str]:
    """Profile counts that ``Node.mig_layout`` pins on one GPU (empty: MIG on, nothing carved)."""
    for entry in layout_entries(node.mig_layout or [], range(gpu_count)):
        if gpu_index in entry.devices:
            return Counter(entry.profiles)
    return Counter()


def layout_starts(geometry: MigGeometry, profiles: Counter[str]) -> list[MigSlice] | None:
    """Where a pinned layout's instances sit (profiles this GPU does not know are left out)."""
    return mig_layout_starts(geometry, {name: count for name, count in profiles.items() if name in geometry.by_name})


def pinned_free_instances(*, node: Node, gpu: GpuRow, gpu_count: int, profile: str, taken: GpuUse) -> list[int]:
    """Start slots of the pinned ``profile`` instances on this GPU that no reservation holds."""
    geometry = geometry_for_model(gpu.model, gpu.memory_mib)
    if geometry is None or taken.milli:
        return []
    layout = pinned_layout(node=node, gpu_index=gpu.index, gpu_count=gpu_count)
    instances = layout_starts(geometry, layout) or []
    held = {(slice_.profile, slice_.start) for slice_ in taken.slices}
    return [instance.start for instance in instances if instance.profile == profile and (profile, instance.start) not in held]

"""The GPU map of one cluster: each GPU with the share of it that allocations hold, by department.

Allocations reserve capacity on a cluster, not yet on concrete GPUs, so this lays the cluster's
holding allocations out on its GPUs the way the device plugin would have to (first fit; a GPU
holds one kind of sharing at a time: whole, MIG slices, or replicas of one size). When the
placement engine records reservations per GPU, ``gpu_map`` should draw those instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from decimal import Decimal

from allocations.models import Allocation, Flavor, SharingMode
from allocations.states import HOLDING_STATES
from clusters.models import Cluster, Node

# Colour-blind-friendly hues dark enough for white text and a 3:1 contrast against the light GPU box.
PALETTE = ("#0b5cad", "#b35900", "#1a7f37", "#8250df", "#bf3989", "#0a6f78", "#9a6700", "#57606a")
GPU_WIDTH = 100
GPU_GAP = 12
MIG_SLICES = 7
_MIG_COMPUTE = re.compile(r"^([1-7])g\.")
_EPSILON = Decimal("0.0001")


def unit_share(flavor: Flavor) -> Decimal:
    """The fraction of one GPU that one unit of the flavor occupies."""
    if flavor.sharing_mode == SharingMode.MIG:
        match = _MIG_COMPUTE.match(flavor.mig_profile or "")
        return Decimal(int(match.group(1)) if match else MIG_SLICES) / MIG_SLICES
    if flavor.sharing_mode in (SharingMode.MPS, SharingMode.TIMESLICE) and flavor.replicas:
        return Decimal(1) / flavor.replicas
    if flavor.sharing_mode == SharingMode.VGPU:
        return Decimal(flavor.compute_percent) / 100
    return Decimal(1)


def sharing_key(flavor: Flavor) -> str:
    """GPUs hold one kind of sharing at a time; replicas of different sizes do not mix."""
    if flavor.sharing_mode in (SharingMode.MPS, SharingMode.TIMESLICE):
        return f"{flavor.sharing_mode}/{flavor.replicas}"
    return str(flavor.sharing_mode)


@dataclass(frozen=True)
class Segment:
    allocation_id: int
    department: str
    flavor: str
    colour: str
    offset: Decimal
    share: Decimal
    units: int

    @property
    def label(self) -> str:
        return f"#{self.allocation_id} {self.department}: {self.units} × {self.flavor}"

    @property
    def x(self) -> str:
        return f"{self.offset * GPU_WIDTH:.2f}"

    @property
    def width(self) -> str:
        return f"{self.share * GPU_WIDTH:.2f}"


@dataclass
class GpuCell:
    index: int
    model: str
    mig_capable: bool
    position: int
    mode: str | None = None
    segments: list[Segment] = field(default_factory=list)

    @property
    def used(self) -> Decimal:
        return sum((segment.share for segment in self.segments), Decimal(0))

    @property
    def used_percent(self) -> int:
        return int((self.used * 100).to_integral_value())

    @property
    def x(self) -> int:
        return self.position * (GPU_WIDTH + GPU_GAP)

    @property
    def is_mig(self) -> bool:
        return self.mode == SharingMode.MIG

    @property
    def slice_lines(self) -> list[str]:
        return [f"{GPU_WIDTH * i / MIG_SLICES:.2f}" for i in range(1, MIG_SLICES)] if self.is_mig else []

    @property
    def description(self) -> str:
        if not self.segments:
            return f"GPU {self.index}: free"
        parts = ", ".join(segment.label for segment in self.segments)
        return f"GPU {self.index}: {self.used_percent} % allocated ({parts})"

    def free(self) -> Decimal:
        return Decimal(1) - self.used

    def place(self, *, allocation: Allocation, colour: str, share: Decimal, units: int, key: str) -> None:
        self.mode = key
        last = self.segments[-1] if self.segments else None
        if last is not None and last.allocation_id == allocation.pk:
            self.segments[-1] = replace(last, share=last.share + share * units, units=last.units + units)
            return
        self.segments.append(
            Segment(
                allocation_id=allocation.pk, department=allocation.project.department.slug,
                flavor=allocation.flavor.name, colour=colour, offset=self.used, share=share * units, units=units,
            )
        )


@dataclass(frozen=True)
class NodeMap:
    name: str
    schedulable: bool
    gpus: list[GpuCell]

    @property
    def svg_width(self) -> int:
        return max(len(self.gpus), 1) * (GPU_WIDTH + GPU_GAP)


@dataclass(frozen=True)
class GpuMap:
    nodes: list[NodeMap]
    legend: list[tuple[str, str]]
    unplaced: list[str]


def _fits(gpu: GpuCell, *, flavor: Flavor, key: str, share: Decimal) -> bool:
    if gpu.model != flavor.gpu_model or (key == SharingMode.MIG and not gpu.mig_capable):
        return False
    if gpu.mode is not None and gpu.mode != key:
        return False
    return gpu.free() + _EPSILON >= share


def _lay_out(gpus: list[GpuCell], allocation: Allocation, colour: str) -> int:
    """Place every unit of the allocation; returns how many units found no room."""
    flavor = allocation.flavor
    share, key = unit_share(flavor), sharing_key(flavor)
    left = allocation.quantity
    for gpu in gpus:
        if left == 0:
            break
        units = 0
        while units < left and _fits(gpu, flavor=flavor, key=key, share=share * (units + 1)):
            units += 1
        if units:
            gpu.place(allocation=allocation, colour=colour, share=share, units=units, key=key)
            left -= units
    return left


def gpu_map(*, cluster: Cluster) -> GpuMap:
    nodes = list(Node.objects.filter(cluster=cluster).prefetch_related("gpus").order_by("name"))
    cells: dict[str, list[GpuCell]] = {}
    schedulable_cells: list[GpuCell] = []
    for node in nodes:
        row = [
            GpuCell(index=gpu.index, model=gpu.model, mig_capable=gpu.mig_capable, position=position)
            for position, gpu in enumerate(sorted(node.gpus.all(), key=lambda gpu: gpu.index))
        ]
        cells[node.name] = row
        if node.is_schedulable:
            schedulable_cells.extend(row)
    holding = list(
        Allocation.objects.filter(cluster=cluster, state__in=HOLDING_STATES)
        .select_related("flavor", "project__department")
    )
    department_ids = sorted({allocation.project.department_id for allocation in holding})
    colours = {pk: PALETTE[i % len(PALETTE)] for i, pk in enumerate(department_ids)}
    # Largest shares first, so whole GPUs are not fragmented by small slices.
    holding.sort(key=lambda allocation: (-unit_share(allocation.flavor), allocation.pk))
    unplaced = []
    for allocation in holding:
        missing = _lay_out(schedulable_cells, allocation, colours[allocation.project.department_id])
        if missing:
            unplaced.append(f"#{allocation.pk}: {missing} × {allocation.flavor.name}")
    legend = sorted(
        {(allocation.project.department.slug, colours[allocation.project.department_id]) for allocation in holding}
    )
    return GpuMap(
        nodes=[NodeMap(name=node.name, schedulable=node.is_schedulable, gpus=cells[node.name]) for node in nodes],
        legend=legend,
        unplaced=unplaced,
    )

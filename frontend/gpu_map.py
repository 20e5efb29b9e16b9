"""The GPU map of one cluster: each GPU with the share of it that allocations hold, by department.

Drawn from the live reservations (``allocations.models.Reservation``), i.e. from the concrete
GPUs the placement engine booked for each unit; nothing is laid out or guessed here:

* a whole or shared unit (exclusive, MPS, time-slicing, HAMi vGPU) holds ``gpu_milli / 1000`` of
  each GPU it spans; its segments are stacked from the left in allocation and unit order;
* a MIG unit is one GPU instance. It is drawn at its real place over the GPU's eight memory
  slices (x = ``mig_start / 8`` of the width, width = the profile's memory slices / 8), and its
  share (the percentage shown, ``GpuCell.used``) counts compute slices: the profile's compute / 7.

A GPU's mode comes from the flavors of the allocations it holds (``sharing_key``): ``mig`` when it
holds MIG instances, ``exclusive`` for whole GPUs, ``mps/4`` / ``timeslice/2`` for replicas.
Holding allocations on the cluster with units that have no live reservation (granted before GPU
placement existed) are listed as ``unplaced``. ``gpu_map`` runs four queries whatever the size.

The map is drawn at an instant (now, or the page's ``at``): a unit is drawn when its allocation's
interval holds that instant. Grants booked one after the other may share a GPU, even a MIG
instance's slices, as they never meet; a booking that starts later is listed under its GPU and
node as "booked from" its start, never drawn on top of what holds the GPU at the instant, and
one past its end (its expiry not run yet) is not drawn.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from allocations.catalogue.selectors import holding_with_live_units, live_reservations_on, unplaced_labels
from allocations.models import Flavor, Reservation, SharingMode
from clusters.models import Cluster, Node, NodeSharing
from frontend.forms import DateTimeLocalInput, DescribedFieldsMixin
from frontend.selectors import allocation_urls
from kernel.clock import clock_now
from kernel.times import minute_utc
from placement.mig import COMPUTE_SLICES, MEMORY_SLICES, geometry_for_model
from telemetry.gpu_busy import GpuBusy
from tenants.models import Isolation

# Colour-blind-friendly hues dark enough for white text and a 3:1 contrast against the light GPU box.
PALETTE = ("#0b5cad", "#b35900", "#1a7f37", "#8250df", "#bf3989", "#0a6f78", "#9a6700", "#57606a")
GPU_WIDTH = 100
GPU_GAP = 12
MIG_SLICES = COMPUTE_SLICES
_MIG_COMPUTE = re.compile(r"^([1-7])g\.")
_MILLI = Decimal(1000)


def unit_share(flavor: Flavor) -> Decimal:
    """The fraction of one GPU that one unit of the flavor occupies (MIG: compute slices of 7)."""
    if flavor.sharing_mode == SharingMode.MIG:
        match = _MIG_COMPUTE.match(flavor.mig_profile or "")
        return Decimal(int(match.group(1)) if match else MIG_SLICES) / MIG_SLICES
    if flavor.sharing_mode in (SharingMode.MPS, SharingMode.TIMESLICE) and flavor.replicas:
        return Decimal(1) / flavor.replicas
    if flavor.sharing_mode in (SharingMode.VGPU, SharingMode.VOLCANO_VGPU):
        return Decimal(flavor.compute_percent) / 100
    return Decimal(1)


def sharing_key(flavor: Flavor) -> str:
    """GPUs hold one kind of sharing at a time; replicas of different sizes do not mix."""
    if flavor.sharing_mode in (SharingMode.MPS, SharingMode.TIMESLICE):
        return f"{flavor.sharing_mode}/{flavor.replicas}"
    return str(flavor.sharing_mode)


@dataclass(frozen=True)
class Segment:
    """One drawn rectangle: consecutive units of one allocation, or one MIG instance."""

    allocation_id: int
    department: str
    flavor: str
    colour: str
    offset: Decimal  # where it is drawn, as a fraction of the GPU's width
    share: Decimal  # the fraction of the GPU it holds (MIG: compute slices / 7)
    units: int
    span: Decimal | None = None  # the drawn width when it differs from ``share`` (MIG: memory slices / 8)

    @property
    def label(self) -> str:
        return f"#{self.allocation_id} {self.department}: {self.units} × {self.flavor}"

    @property
    def x(self) -> str:
        return f"{self.offset * GPU_WIDTH:.2f}"

    @property
    def width(self) -> str:
        return f"{(self.share if self.span is None else self.span) * GPU_WIDTH:.2f}"


def _when(moment: datetime.datetime) -> str:
    return minute_utc(moment)


@dataclass(frozen=True)
class Later:
    """A booking on a GPU (or a node's GPUs) that starts after the map's instant."""

    allocation_id: int
    department: str
    flavor: str
    starts_at: datetime.datetime
    units: int = 1
    gpus: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        where = f" on {', '.join(f'gpu{index}' for index in self.gpus)}" if self.gpus else ""
        return (f"#{self.allocation_id} {self.department}: {self.units} × {self.flavor} booked from "
                f"{_when(self.starts_at)}{where}")  # fmt: skip


@dataclass
class GpuCell:
    index: int
    model: str
    mig_capable: bool
    position: int
    mode: str | None = None
    segments: list[Segment] = field(default_factory=list)
    memory_mib: int = 0
    busy: GpuBusy | None = None  # the utilisation overlay, when the page adds it (frontend.utilisation)
    later: list[Later] = field(default_factory=list)  # bookings starting after the map's instant
    node_name: str = ""
    links: dict[int, str] = field(default_factory=dict)  # the holders' pages the reader may open (gpu_map_links)

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
        """The borders of the eight memory slices, on which MIG instances are drawn."""
        return [f"{GPU_WIDTH * i / MEMORY_SLICES:.2f}" for i in range(1, MEMORY_SLICES)] if self.is_mig else []

    @property
    def holders(self) -> list[tuple[int, str, str, int]]:
        """(allocation, department, flavor, units) per allocation on this GPU, in drawing order."""
        units: dict[tuple[int, str, str], int] = {}
        for segment in self.segments:
            key = (segment.allocation_id, segment.department, segment.flavor)
            units[key] = units.get(key, 0) + segment.units
        return [(pk, department, flavor, count) for (pk, department, flavor), count in units.items()]

    @property
    def description(self) -> str:
        if not self.segments:
            now = f"GPU {self.index}: free"
        else:
            parts = ", ".join(f"#{pk} {department}: {units} × {flavor}" for pk, department, flavor, units in self.holders)
            now = f"GPU {self.index}: {self.used_percent} % allocated ({parts})"
        return "; ".join([now, *(booking.label for booking in self.later)])

    @property
    def name(self) -> str:
        """The GPU's accessible name: which GPU, the grants holding it, how busy it is."""
        if self.holders:
            grants = ", ".join(f"grant #{pk} ({department}, {units} × {flavor})"
                               for pk, department, flavor, units in self.holders)  # fmt: skip
            held = f"{grants}, {self.used_percent} % allocated"
        else:
            held = "free"
        parts = [f"GPU {self.index} on {self.node_name}: {held}"]
        if self.busy is not None:
            parts.append(self.busy.label)
        parts.extend(booking.label for booking in self.later)
        return "; ".join(parts)

    @property
    def link(self) -> str | None:
        """The page of the one grant holding this GPU, when the reader may open it."""
        holders = self.holders
        return self.links.get(holders[0][0]) if len(holders) == 1 else None

    @property
    def holder_links(self) -> list[tuple[str, str | None]]:
        """(label, page or None) per grant, for a GPU that several grants share."""
        return [(f"#{pk} {department}", self.links.get(pk)) for pk, department, _flavor, _units in self.holders]

    def book_later(self, booking: Later) -> None:
        """Note a unit booked from a later start (one entry per allocation)."""
        for position, known in enumerate(self.later):
            if known.allocation_id == booking.allocation_id:
                self.later[position] = replace(known, units=known.units + booking.units)
                return
        self.later.append(booking)

    def hold(self, *, key: str) -> None:
        """Record the sharing kind of a unit on this GPU (a mix, which should not happen, shows as such)."""
        if self.mode is None or self.mode == key:
            self.mode = key
        else:
            self.mode = "+".join(sorted({*self.mode.split("+"), key}))

    def stack(self, segment: Segment) -> None:
        """Add a whole or shared unit after the ones the GPU holds already (merged with the last
        one when it belongs to the same allocation)."""
        stacked = [index for index, held in enumerate(self.segments) if held.span is None]
        if stacked and self.segments[stacked[-1]].allocation_id == segment.allocation_id:
            last = self.segments[stacked[-1]]
            self.segments[stacked[-1]] = replace(last, share=last.share + segment.share, units=last.units + segment.units)
            return
        offset = sum((self.segments[index].share for index in stacked), Decimal(0))
        self.segments.append(replace(segment, offset=offset))


@dataclass(frozen=True)
class NodeMap:
    name: str
    schedulable: bool
    gpus: list[GpuCell]
    pools: tuple[str, ...] = ()  # who the node is kept for: its MPS tenant, dedicated departments or projects
    later: tuple[Later, ...] = ()  # its bookings that start after the map's instant, by start

    @property
    def svg_width(self) -> int:
        return max(len(self.gpus), 1) * (GPU_WIDTH + GPU_GAP)

@dataclass(frozen=True)
class GpuMap:
    nodes: list[NodeMap]
    legend: list[tuple[str, str]]
    unplaced: list[str]
    at: datetime.datetime | None = None  # the instant drawn
    now: bool = True  # whether it is the page's now (no ``at`` asked for)

    @property
    def when(self) -> str:
        return _when(self.at) if self.at is not None else ""


class MapAtForm(DescribedFieldsMixin, forms.Form):
    """The GPU map's query string: ``at``, the instant to draw (now by default; not before the
    current minute, as the map draws the bookings as they stand, not history)."""

    at = forms.DateTimeField(
        required=False, label="At (UTC)", widget=DateTimeLocalInput(),
        error_messages={"invalid": "at: give an instant as YYYY-MM-DDTHH:MM (UTC) or ISO 8601 with an offset."},
        help_text="The instant to draw the map at; empty: now.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.describe_fields()

    def clean_at(self) -> datetime.datetime | None:
        moment: datetime.datetime | None = self.cleaned_data.get("at")
        if moment is not None and moment < clock_now().replace(second=0, microsecond=0):
            raise forms.ValidationError(
                "at: must not lie in the past: the map draws the bookings as they stand (now or a later instant)."
            )
        return moment


def _mig_extent(*, cell: GpuCell, profile: str) -> tuple[Decimal, Decimal]:
    """(compute share of 7, memory width of 8) of one MIG instance on this GPU."""
    geometry = geometry_for_model(cell.model, cell.memory_mib)
    known = geometry.by_name.get(profile) if geometry is not None else None
    if known is not None:
        return Decimal(known.compute) / COMPUTE_SLICES, Decimal(known.memory_slices) / MEMORY_SLICES
    match = _MIG_COMPUTE.match(profile)  # a profile this GPU's table does not know: its compute, drawn as wide
    compute = int(match.group(1)) if match else COMPUTE_SLICES
    return Decimal(compute) / COMPUTE_SLICES, Decimal(compute) / MEMORY_SLICES


def _draw(cell: GpuCell, row: Reservation, *, colour: str) -> None:
    allocation = row.allocation
    segment = Segment(
        allocation_id=allocation.pk, department=allocation.project.department.slug, flavor=allocation.flavor.name,
        colour=colour, offset=Decimal(0), share=Decimal(row.gpu_milli) / _MILLI, units=1,
    )
    if row.mig_profile:
        cell.hold(key=str(SharingMode.MIG))
        share, span = _mig_extent(cell=cell, profile=row.mig_profile)
        offset = Decimal(row.mig_start or 0) / MEMORY_SLICES
        cell.segments.append(replace(segment, offset=offset, share=share, span=span))
        return
    cell.hold(key=sharing_key(allocation.flavor))
    cell.stack(segment)


def _pools(node: Node, rows: list[Reservation]) -> tuple[str, ...]:
    """Captions for the pools a node's bookings keep it in (docs/sharing.md): the department its
    MPS daemon serves, and the dedicated departments and projects holding units there."""
    out: list[str] = []
    if node.sharing == NodeSharing.MPS and rows:
        out.append(f"MPS serves {rows[0].allocation.project.department.slug}")
    for row in rows:
        project = row.allocation.project
        for what, isolation in ((project.department.slug, project.department.isolation), (project.slug, project.isolation)):
            if isolation != Isolation.SHARED:
                caption = f"{what}: dedicated {'nodes' if isolation == Isolation.DEDICATED_NODES else 'GPUs'}"
                if caption not in out:
                    out.append(caption)
    return tuple(out)


def _later(units: dict[int, list[Reservation]]) -> tuple[Later, ...]:
    """One line per allocation booked on the node from a later start: its units and GPUs."""
    out = []
    for rows in units.values():
        allocation = rows[0].allocation
        out.append(Later(
            allocation_id=allocation.pk, department=allocation.project.department.slug, flavor=allocation.flavor.name,
            starts_at=allocation.starts_at, units=len(rows),
            gpus=tuple(sorted({int(index) for row in rows for index in row.gpu_indices})),
        ))  # fmt: skip
    return tuple(sorted(out, key=lambda booking: (booking.starts_at, booking.allocation_id)))


def _place(
    reservations: list[Reservation], *, cells: dict[tuple[int, int], GpuCell], colours: dict[int, str],
    moment: datetime.datetime,
) -> dict[int, dict[int, list[Reservation]]]:
    """Draw each unit held at ``moment`` on its GPUs (a GPU the inventory no longer lists is not
    drawn), note under its GPUs each unit booked from a later start; returns those, node →
    allocation → units. A unit past its end at ``moment`` (its expiry not run yet) holds nothing."""
    later: dict[int, dict[int, list[Reservation]]] = {}
    for reservation in reservations:
        allocation = reservation.allocation
        if allocation.ends_at <= moment:
            continue
        listed = [cell for index in reservation.gpu_indices if (cell := cells.get((reservation.node_id, int(index))))]
        if allocation.starts_at <= moment:
            for cell in listed:
                _draw(cell, reservation, colour=colours[allocation.project.department_id])
            continue
        booking = Later(allocation_id=allocation.pk, department=allocation.project.department.slug,
                        flavor=allocation.flavor.name, starts_at=allocation.starts_at)
        for cell in listed:
            cell.book_later(booking)
        later.setdefault(reservation.node_id, {}).setdefault(allocation.pk, []).append(reservation)
    return later


def gpu_map(*, cluster: Cluster, at: datetime.datetime | None = None) -> GpuMap:
    """The map of the cluster's GPUs at ``at`` (default: now)."""
    moment = at or clock_now()
    nodes = list(Node.objects.filter(cluster=cluster).prefetch_related("gpus").order_by("name"))
    cells: dict[tuple[int, int], GpuCell] = {}
    rows: dict[int, list[GpuCell]] = {}
    for node in nodes:
        row = [
            GpuCell(
                index=gpu.index, model=gpu.model, mig_capable=gpu.mig_capable, position=position,
                memory_mib=gpu.memory_mib, node_name=node.name,
            )
            for position, gpu in enumerate(sorted(node.gpus.all(), key=lambda gpu: gpu.index))
        ]
        rows[node.pk] = row
        cells.update({(node.pk, cell.index): cell for cell in row})
    reservations = list(
        live_reservations_on(cluster=cluster)
        .select_related("allocation__flavor", "allocation__project__department")
        .order_by("allocation_id", "unit", "pk")
    )
    holding = list(
        holding_with_live_units(cluster_ids=[cluster.pk]).select_related("flavor", "project__department").order_by("pk")
    )
    departments = {row.allocation.project.department for row in reservations}
    departments |= {allocation.project.department for allocation in holding}
    colours = {
        department.pk: PALETTE[i % len(PALETTE)]
        for i, department in enumerate(sorted(departments, key=lambda department: department.pk))
    }
    on_node: dict[int, list[Reservation]] = {}
    for reservation in reservations:
        on_node.setdefault(reservation.node_id, []).append(reservation)
    later = _place(reservations, cells=cells, colours=colours, moment=moment)
    for cell in cells.values():
        cell.segments.sort(key=lambda segment: segment.offset)
    unplaced = unplaced_labels(holding)
    legend = sorted((department.slug, colours[department.pk]) for department in departments)
    return GpuMap(
        nodes=[
            NodeMap(name=node.name, schedulable=node.is_schedulable, gpus=rows[node.pk],
                    pools=_pools(node, on_node.get(node.pk, [])), later=_later(later.get(node.pk, {})))
            for node in nodes
        ],
        legend=legend,
        unplaced=unplaced,
        at=moment,
        now=at is None,
    )


def gpu_map_links(*, user: AbstractBaseUser | AnonymousUser, drawn: GpuMap) -> GpuMap:
    """Link each GPU to the pages of the grants holding it that ``user`` may open (one query)."""
    ids = {pk for node in drawn.nodes for cell in node.gpus for pk, _department, _flavor, _units in cell.holders}
    urls = allocation_urls(user=user, ids=ids) if ids else {}
    for node in drawn.nodes:
        for cell in node.gpus:
            cell.links = {pk: urls[pk] for pk, _department, _flavor, _units in cell.holders if pk in urls}
    return drawn

"""The inventory the engine places onto: nodes, their GPUs, and what is already reserved."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .peaks import ALWAYS, Span

GPU_MILLI = 1000
"""Capacity of one GPU in thousandths (the unit of a share)."""


@dataclass(frozen=True)
class MigSlice:
    """A MIG GPU instance: its profile name, first memory slice and when it is held (always, unless
    it is a booking of a grant over an interval: see :mod:`placement.peaks`)."""

    profile: str
    start: int
    during: Span = ALWAYS


@dataclass(frozen=True)
class Gpu:
    """One physical GPU.

    ``mig_geometry`` is None for a GPU in shared (milli) mode; otherwise it names a key of
    :data:`placement.mig.GEOMETRIES` and ``mig_slices`` lists the instances booked on
    it, each held during its span: the GPU holds every memory slice any of them takes, and the
    most compute slices and ``+me`` instances held at one instant (``MigGeometry.held``); two of
    them on one memory slice at one instant are refused. ``used_milli`` is the share already
    reserved on a shared-mode GPU (the most held at one instant).
    """

    index: int
    model: str
    memory_mib: int = 0
    used_milli: int = 0
    mig_geometry: str | None = None
    mig_slices: tuple[MigSlice, ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.used_milli <= GPU_MILLI:
            raise ValueError(f"GPU {self.index}: used_milli must be within 0..{GPU_MILLI}")
        if self.mig_geometry is None and self.mig_slices:
            raise ValueError(f"GPU {self.index}: MIG slices on a GPU that is not in MIG mode")
        if self.mig_geometry is not None and self.used_milli:
            raise ValueError(f"GPU {self.index}: a MIG-mode GPU cannot carry milli shares")

    @property
    def mig_mode(self) -> bool:
        return self.mig_geometry is not None


@dataclass(frozen=True)
class Node:
    """A schedulable node with its capacities and current usage."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: tuple[Gpu, ...] = ()
    cpu_used_milli: int = 0
    memory_used_mib: int = 0
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        indices = [g.index for g in self.gpus]
        if len(set(indices)) != len(indices):
            raise ValueError(f"node {self.name}: duplicate GPU index")
        if not (0 <= self.cpu_used_milli <= self.cpu_milli and 0 <= self.memory_used_mib <= self.memory_mib):
            raise ValueError(f"node {self.name}: usage outside capacity")


def node_from_record(record: Mapping[str, Any]) -> Node:
    """Build a :class:`Node` from plain data (e.g. a DB row joined with its GPU rows).

    Expected keys: ``name``, ``cpu_milli``, ``memory_mib``, optional ``cpu_used_milli``,
    ``memory_used_mib`` and ``gpus`` (a list of mappings with ``index``, ``model`` and optional
    ``memory_mib``, ``used_milli``, ``mig_geometry``, ``mig_slices`` as ``[{profile, start}]``, each
    with an optional ``during``: ``[begin, end]``).
    Shortcut: ``gpu_count`` + ``gpu_model`` create identical, empty GPUs.
    """
    gpus: list[Gpu] = []
    for i, g in enumerate(record.get("gpus") or ()):
        gpus.append(
            Gpu(
                index=int(g.get("index", i)),
                model=str(g["model"]),
                memory_mib=int(g.get("memory_mib", 0)),
                used_milli=int(g.get("used_milli", 0)),
                mig_geometry=g.get("mig_geometry"),
                mig_slices=tuple(MigSlice(str(s["profile"]), int(s["start"]), _span(s.get("during")))
                                 for s in g.get("mig_slices") or ()),
            )
        )
    if not gpus and record.get("gpu_count"):
        gpus = [
            Gpu(i, str(record["gpu_model"]), int(record.get("gpu_memory_mib", 0)))
            for i in range(int(record["gpu_count"]))
        ]
    return Node(
        name=str(record["name"]),
        cpu_milli=int(record["cpu_milli"]),
        memory_mib=int(record["memory_mib"]),
        gpus=tuple(gpus),
        cpu_used_milli=int(record.get("cpu_used_milli", 0)),
        memory_used_mib=int(record.get("memory_used_mib", 0)),
    )


def _span(value: Any) -> Span:
    if value is None:
        return ALWAYS
    begin, end = value
    return float(begin), float(end)


def nodes_from_records(records: Iterable[Mapping[str, Any]]) -> list[Node]:
    return [node_from_record(r) for r in records]

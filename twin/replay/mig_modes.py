"""The GPUs of MIG nodes under the mixed strategy, as the portal shows them to the placement engine
(``allocations.booking.view`` and ``attempts``): a GPU holding MIG instances is in MIG mode, one
holding a whole GPU's unit in shared mode, and an empty one in the mode the unit being placed needs.

At rest every empty GPU of a MIG node is in shared mode: a whole GPU may take it, and a MIG unit
finds only the GPUs already carved, where the portal tries it first. *Opened*, every empty GPU of
a MIG node is in MIG mode: where the portal places a MIG unit that no carved GPU takes, and what a
share sees (a MIG node offers no vGPU share: none fits on a MIG-mode GPU). A GPU left empty goes
back to shared mode when a pass closes, and when its last instance is released.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

from placement import Cluster, Gpu, Node, Placement, Request
from placement.decisions import RequestKind
from placement.inventory import GPU_MILLI
from placement.mig_tables import NO_MIG

Slot = tuple[int, int]  # (row, slot) of a GPU in the engine's arrays


def nodes_at_rest(nodes: Sequence[Node]) -> list[Node]:
    """The nodes as the engine's cluster holds them at rest: every GPU in shared mode."""
    return [node if not any(g.mig_geometry for g in node.gpus) else
            Node(node.name, node.cpu_milli, node.memory_mib,
                 tuple(Gpu(g.index, g.model, g.memory_mib, g.used_milli) for g in node.gpus),
                 node.cpu_used_milli, node.memory_used_mib, node.labels)
            for node in nodes]


class MigModes:
    """The MIG nodes' GPUs of one engine cluster and their geometries (empty: no MIG node)."""

    def __init__(self, cluster: Cluster, nodes: Sequence[Node]) -> None:
        self.cluster = cluster
        self.geometry: dict[Slot, str] = {}
        for node in nodes:
            row = cluster.index[node.name]
            for gpu in node.gpus:
                if gpu.mig_geometry is not None:
                    self.geometry[(row, cluster._slot[row][gpu.index])] = gpu.mig_geometry

    def alike(self, cluster: Cluster) -> MigModes:
        """The same GPUs' geometries on ``cluster``, a copy of this one's cluster (its slots)."""
        other = MigModes.__new__(MigModes)
        other.cluster, other.geometry = cluster, self.geometry
        return other

    def __bool__(self) -> bool:
        return bool(self.geometry)

    def _empty_shared(self, slot: Slot) -> bool:
        cluster = self.cluster
        return bool(cluster.mig_state[slot] == NO_MIG and cluster.gpu_free[slot] == GPU_MILLI)

    def _empty_mig(self, slot: Slot) -> bool:
        cluster = self.cluster
        return bool(cluster.mig_state[slot] != NO_MIG and not cluster.mig_instances.get(slot))

    @contextmanager
    def opened(self) -> Iterator[None]:
        """Every empty GPU of a MIG node in MIG mode while the block runs; those still empty after
        it back in shared mode."""
        opened = [slot for slot in self.geometry if self._empty_shared(slot)]
        for slot in opened:
            self.cluster.gpu_mode_set(*slot, self.geometry[slot])
        try:
            yield
        finally:
            for slot in opened:
                if self._empty_mig(slot):
                    self.cluster.gpu_mode_set(*slot, None)

    def ready(self, unit: Placement) -> None:
        """Before ``unit`` is booked: an empty GPU it carves an instance on turns to MIG mode."""
        if unit.request.kind is not RequestKind.MIG:
            return
        for slot in self._slots(unit):
            if slot in self.geometry and self._empty_shared(slot):
                self.cluster.gpu_mode_set(*slot, self.geometry[slot])

    def settle(self, units: Iterable[Placement]) -> None:
        """After ``units`` were released: a GPU of a MIG node left without instances rests."""
        for unit in units:
            if unit.request.kind is RequestKind.MIG:
                for slot in self._slots(unit):
                    if slot in self.geometry and self._empty_mig(slot):
                        self.cluster.gpu_mode_set(*slot, None)

    def _slots(self, unit: Placement) -> list[Slot]:
        row = self.cluster.index[unit.node]
        return [(row, self.cluster._slot[row][gpu]) for gpu in unit.gpu_indices]

    def place_opened_first(self, request: Request) -> bool:
        """Whether a unit of ``request`` is placed opened (a share), not at rest first (a MIG
        unit, carved GPUs first) nor only at rest (a whole GPU)."""
        return bool(self.geometry) and request.kind is RequestKind.SHARED

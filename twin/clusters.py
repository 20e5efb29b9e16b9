"""The cluster format: the Alibaba ``openb_node_list_gpu_node.csv`` columns as they are
(``sn, cpu_milli, memory_mib, gpu, model``), one node a line, and an optional ``mig`` column: the
MIG geometry of the node's GPUs (a key of ``placement.mig.GEOMETRIES``; empty: shared mode)
(docs/twin.md, "Clusters")."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from placement import Gpu, Node
from placement.mig import GEOMETRIES
from twin.errors import TwinInputError

COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
MIG_COLUMN = "mig"  # optional: the MIG geometry of the node's GPUs


def _count(source: str, line: int, row: dict[str, str], field: str, high: int) -> int:
    value = (row.get(field) or "").strip()
    if not value.isdigit() or int(value) > high:
        raise TwinInputError(source, line, field, f"must be a whole number from 0 to {high}, not {value!r}")
    return int(value)


def nodes_read(text: str, *, source: str = "cluster") -> list[Node]:
    """The nodes of a cluster file: each GPU a whole GPU of the row's model, in shared mode, or in
    MIG mode (``Gpu.mig_geometry``) where the row names a geometry in its ``mig`` column."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [column for column in COLUMNS if column not in (reader.fieldnames or ())]
    if missing:
        raise TwinInputError(source, 1, missing[0], f"missing column (the header must name {', '.join(COLUMNS)})")
    nodes: list[Node] = []
    seen: set[str] = set()
    for row in reader:
        line = reader.line_num
        name = (row.get("sn") or "").strip()
        if not name or name in seen:
            raise TwinInputError(source, line, "sn", "required and unique" if name else "required")
        seen.add(name)
        gpus = _count(source, line, row, "gpu", 64)
        model = (row.get("model") or "").strip()
        if gpus and not model:
            raise TwinInputError(source, line, "model", "required for a node with GPUs")
        geometry = _geometry(source, line, row, gpus)
        nodes.append(Node(name, _count(source, line, row, "cpu_milli", 10**9), _count(source, line, row, "memory_mib", 10**12),
                          tuple(Gpu(index, model, mig_geometry=geometry) for index in range(gpus))))
    if not nodes:
        raise TwinInputError(source, 1, "(rows)", "a cluster needs at least one node")
    return nodes


def _geometry(source: str, line: int, row: dict[str, str], gpus: int) -> str | None:
    value = (row.get(MIG_COLUMN) or "").strip()
    if not value:
        return None
    if value not in GEOMETRIES:
        raise TwinInputError(source, line, MIG_COLUMN,
                             f"no MIG geometry {value!r} (known: {', '.join(GEOMETRIES)}; empty: shared mode)")
    if not gpus:
        raise TwinInputError(source, line, MIG_COLUMN, "a node without GPUs has no MIG geometry")
    return value


def nodes_load(path: Path) -> list[Node]:
    return nodes_read(path.read_text(), source=path.name)


def nodes_write(nodes: list[Node]) -> str:
    """The nodes in the same format (every GPU of a node of one model and one mode, as the format
    holds); the ``mig`` column only where a node has MIG-mode GPUs, so a cluster without any is
    written in the Alibaba columns alone."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    mig = any(gpu.mig_geometry is not None for node in nodes for gpu in node.gpus)
    writer.writerow([*COLUMNS, MIG_COLUMN] if mig else COLUMNS)
    for node in nodes:
        first = node.gpus[0] if node.gpus else None
        row: list[object] = [node.name, node.cpu_milli, node.memory_mib, len(node.gpus), first.model if first else ""]
        writer.writerow([*row, (first.mig_geometry or "") if first else ""] if mig else row)
    return out.getvalue()


def installed_gpus(nodes: list[Node]) -> int:
    return sum(len(node.gpus) for node in nodes)

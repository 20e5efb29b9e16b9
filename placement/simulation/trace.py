"""Reading the Alibaba GPU trace v2023 ("openb") CSV files into engine objects.

Schema: ``../shared/bench/traces/alibaba-gpu-v2023/README.md``. ``gpu_spec`` is a '|'-separated
set of allowed models (empty = any); times, QoS and phase are ignored by the protocol.
"""

from __future__ import annotations

import csv
from pathlib import Path

from ..decisions import Request
from ..inventory import Gpu, Node

TRACE_DIR = Path("..") / "shared" / "bench" / "traces" / "alibaba-gpu-v2023"
"""Trace folder relative to the repository root."""


def default_trace_dir(repo_root: Path | None = None) -> Path:
    root = repo_root if repo_root is not None else Path(__file__).resolve().parents[3]
    return (root / TRACE_DIR).resolve()


def pod_list_path(name: str, repo_root: Path | None = None) -> Path:
    """``default`` -> ``.../openb_pod_list_default.csv``; paths are returned unchanged."""
    if name.endswith(".csv") or "/" in name:
        return Path(name)
    return default_trace_dir(repo_root) / f"openb_pod_list_{name}.csv"


def node_list_path(repo_root: Path | None = None) -> Path:
    return default_trace_dir(repo_root) / "openb_node_list_gpu_node.csv"


def load_nodes(path: Path, mig_geometry: str | None = None) -> list[Node]:
    """GPU nodes of the trace. With ``mig_geometry`` every GPU is in MIG mode with that geometry
    (benchmark B2), keeping the trace model name for model constraints."""
    nodes = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            k = int(row["gpu"])
            model = row["model"].strip()
            gpus = tuple(Gpu(i, model, 0, 0, mig_geometry) for i in range(k))
            nodes.append(Node(row["sn"], int(row["cpu_milli"]), int(row["memory_mib"]), gpus))
    return nodes


def load_pods(path: Path) -> list[Request]:
    pods = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            k = int(row["num_gpu"])
            milli = int(row["gpu_milli"])
            spec = frozenset(s.strip() for s in (row.get("gpu_spec") or "").split("|") if s.strip())
            if k == 0 or milli == 0:
                pods.append(Request(int(row["cpu_milli"]), int(row["memory_mib"]), 0, name=row["name"]))
            else:
                pods.append(Request(int(row["cpu_milli"]), int(row["memory_mib"]), k, milli, None, spec,
                                    name=row["name"]))
    return pods

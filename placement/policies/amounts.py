"""GPU capacity in one unit for both worlds: milli for shared GPUs, compute slices x 1000/7 for MIG."""

from __future__ import annotations

import numpy as np

from .. import mig_tables
from ..arrays import FloatArray, IntArray
from ..cluster import Cluster
from ..decisions import Request, RequestKind
from ..inventory import GPU_MILLI
from ..mig import COMPUTE_SLICES, mig_compute

MIG_UNIT = GPU_MILLI / COMPUTE_SLICES


def gpu_free(cluster: Cluster, rows: IntArray) -> FloatArray:
    """Free GPU amount per GPU slot of ``rows`` (0 for empty slots)."""
    shared = np.maximum(cluster.gpu_free[rows], 0).astype(np.float64)
    if not cluster.mig_gpus:
        return shared
    mig = mig_tables.free_compute_table()[cluster.mig_state[rows]] * MIG_UNIT
    out: FloatArray = np.where(cluster.shared_gpu[rows], shared, mig)
    return out


def node_free(cluster: Cluster, rows: IntArray) -> FloatArray:
    if not cluster.mig_gpus:
        return cluster.free_milli[rows].astype(np.float64)
    out: FloatArray = gpu_free(cluster, rows).sum(axis=1)
    return out




def per_gpu_demand(request: Request) -> float:
    if request.kind is RequestKind.MIG:
        assert request.mig_profile is not None
        return mig_compute(request.mig_profile) * MIG_UNIT
    return float(request.gpu_milli)


def total_demand(request: Request) -> float:
    return request.gpu_count * per_gpu_demand(request) if request.gpu_count else 0.0

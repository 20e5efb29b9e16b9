"""Rejection reasons a person understands ("no H100 with 20 GiB free; the largest free share is
12 GiB on node gpu-07"). Only runs when nothing fits, so clarity beats speed here."""

from __future__ import annotations

import numpy as np

from . import mig_tables
from .arrays import BoolArray
from .cluster import Cluster
from .decisions import Rejection, RejectionKind, Request, RequestKind
from .inventory import GPU_MILLI


def _gib(mib: float) -> str:
    return f"{mib / 1024:.4g} GiB"


def _share(milli: int, mem_mib: int) -> str:
    pct = f"{milli / 10:g}% of a GPU"
    return f"{_gib(milli * mem_mib / GPU_MILLI)} ({pct})" if mem_mib else pct


def _gpus(models: str, count: int) -> str:
    """``GPUs``, ``A100 GPU``, ``A100 GPUs``."""
    noun = "GPU" if count == 1 else "GPUs"
    return f"{models} {noun}" if models else noun


def explain_rejection(cluster: Cluster, request: Request) -> Rejection:
    models = "/".join(sorted(request.allowed_models))
    what = models or "GPU"
    gpu_ok, node_ok = cluster.model_masks(request.allowed_models)
    kind = request.kind
    if kind is not RequestKind.CPU_ONLY:
        if request.allowed_models and not gpu_ok.any():
            return Rejection(request, RejectionKind.NO_SUCH_MODEL, f"the cluster has no {models} GPU")
        if kind is RequestKind.MIG and not (gpu_ok & (cluster.mig_state != mig_tables.NO_MIG)).any():
            return Rejection(request, RejectionKind.NO_SUCH_MODEL, f"the cluster has no {what} in MIG mode")
        if kind is not RequestKind.MIG and not (gpu_ok & cluster.shared_gpu).any():
            return Rejection(request, RejectionKind.NO_SUCH_MODEL, f"every {what} is in MIG mode")
    gpu = cluster.gpu_fit(request)
    if kind is RequestKind.CPU_ONLY or (gpu & node_ok).any():
        # GPUs exist somewhere; CPU or memory is what is missing on those nodes
        pool = np.flatnonzero(gpu & node_ok) if kind is not RequestKind.CPU_ONLY else np.arange(len(cluster.names))
        best = pool[np.argmax(cluster.cpu_free[pool] * 1e6 + cluster.mem_free[pool])]
        where = f"node with a suitable {what}" if kind is not RequestKind.CPU_ONLY else "node"
        return Rejection(
            request,
            RejectionKind.CPU_MEMORY,
            f"no {where} has {request.cpu_milli / 1000:g} cores and {_gib(request.memory_mib)} free; "
            f"the most free is {cluster.cpu_free[best] / 1000:g} cores and {_gib(float(cluster.mem_free[best]))} "
            f"on node {cluster.names[best]}",
        )
    if kind is RequestKind.SHARED:
        return _no_share(cluster, request, gpu_ok, what)
    if kind is RequestKind.WHOLE:
        return _no_whole_gpus(cluster, request, gpu_ok, models)
    return _no_mig_slice(cluster, request, gpu_ok, models)


def _no_share(cluster: Cluster, request: Request, gpu_ok: BoolArray, what: str) -> Rejection:
    free = np.where(gpu_ok & cluster.shared_gpu, cluster.gpu_free, -1)
    i, j = (int(x) for x in np.unravel_index(int(free.argmax()), free.shape))
    need = _share(request.gpu_milli, int(cluster.gpu_mem[i, j]))
    return Rejection(
        request,
        RejectionKind.GPU_SHARE,
        f"no {what} with {need} free; the largest free share is "
        f"{_share(int(free[i, j]), int(cluster.gpu_mem[i, j]))} on node {cluster.names[i]} "
        f"(GPU {cluster.gpu_label[i, j]})",
    )


def _no_whole_gpus(cluster: Cluster, request: Request, gpu_ok: BoolArray, models: str) -> Rejection:
    full = ((cluster.gpu_free == GPU_MILLI) & gpu_ok).sum(axis=1)
    i = int(full.argmax())
    return Rejection(
        request,
        RejectionKind.WHOLE_GPUS,
        f"no node has {request.gpu_count} fully free {_gpus(models, request.gpu_count)}; the most is "
        f"{int(full[i])} on node {cluster.names[i]}",
    )


def _no_mig_slice(cluster: Cluster, request: Request, gpu_ok: BoolArray, models: str) -> Rejection:
    what = models or "GPU"
    assert request.mig_profile is not None
    legal = mig_tables.legal_table(request.mig_profile)[cluster.mig_state] & gpu_ok
    if not legal.any():
        fc = np.where(gpu_ok, mig_tables.free_compute_table()[cluster.mig_state], -1)
        i, j = (int(x) for x in np.unravel_index(int(fc.argmax()), fc.shape))
        return Rejection(
            request,
            RejectionKind.MIG_SLICE,
            f"no {what} has a free, legally placed {request.mig_profile} slot; the most free compute is "
            f"{int(fc[i, j])}/7 slices on node {cluster.names[i]} (GPU {cluster.gpu_label[i, j]}), "
            f"not at a legal start",
        )
    counts = legal.sum(axis=1)
    i = int(counts.argmax())
    return Rejection(
        request,
        RejectionKind.MIG_SLICE,
        f"no node has {request.gpu_count} {_gpus(models, request.gpu_count)} with room for {request.mig_profile}; the most is "
        f"{int(counts[i])} on node {cluster.names[i]}",
    )

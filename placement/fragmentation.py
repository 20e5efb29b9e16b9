"""Vectorised node fragmentation F_n and its change under a hypothetical placement.

Rule from ``../shared/reference/placement-benchmark.md`` §3: for a task class m, F_n(m) is all
free GPU capacity of the node if m is CPU-only, or m's model constraint excludes the node, or the
node lacks CPU for m, or fewer than num_gpu(m) GPUs can host m's share; otherwise only the free
capacity on GPUs that cannot host m. F_n = sum_m p_m F_n(m). Memory is not part of it.

For MIG GPUs (§7 B2) "can host" means "has a legal start for m's profile" and the free capacity
is the free compute slices, scaled to milli (x 1000 / 7) so both worlds share one unit.

Each GPU is summarised by its free amount ``a`` and a per-class "fits" flag; node terms are
``count[m]`` (GPUs that fit m), ``S[m]`` (free amount on GPUs that do not) and ``T`` (all free).
A placement touches few GPUs, so its effect is an update of these terms, not a recomputation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import mig_tables
from .arrays import BoolArray, FloatArray, IntArray
from .cluster import Cluster
from .decisions import Request, RequestKind
from .inventory import GPU_MILLI
from .mig import COMPUTE_SLICES
from .mig_planner import default_weights, layout_tables
from .workload import Workload

INF = float("inf")


def layout_tie_break() -> FloatArray:
    """A tiny per-MIG-state term (the slice planner's layout judgement, far below one milli)
    that decides between starts the class weights cannot tell apart."""
    frag, options = layout_tables(default_weights())
    out: FloatArray = frag * 1e-6 - options * 1e-9
    return out
MIG_UNIT = GPU_MILLI / COMPUTE_SLICES


class FragModel:
    """Task classes compiled against one cluster's model list."""

    def __init__(self, cluster: Cluster, workload: Workload) -> None:
        self.cluster = cluster
        classes = workload.classes
        m = len(classes)
        w = np.array([c.weight for c in classes], dtype=np.float64)
        self.p: FloatArray = w / w.sum() if m and w.sum() > 0 else w
        self.cpu: IntArray = np.array([c.cpu_milli for c in classes], dtype=np.int64)
        self.count: IntArray = np.array([c.gpu_count for c in classes], dtype=np.int64)
        self.milli: IntArray = np.array(
            [c.gpu_milli if c.gpu_count and c.mig_profile is None else 0 for c in classes], dtype=np.int64
        )
        self.is_gpu_class: BoolArray = self.count > 0
        # row 0 = empty GPU slot, row i+1 = cluster.models[i]
        model_ok = np.zeros((len(cluster.models) + 1, m), dtype=np.bool_)
        for k, c in enumerate(classes):
            for i, name in enumerate(cluster.models):
                model_ok[i + 1, k] = not c.allowed_models or name in c.allowed_models
        self.model_ok = model_ok
        mig_fits = np.zeros((mig_tables.TABLE_SIZE, m), dtype=np.bool_)
        for k, c in enumerate(classes):
            if c.mig_profile is not None and c.gpu_count:
                mig_fits[:, k] = mig_tables.legal_table(c.mig_profile)
        self.mig_fits = mig_fits
        self.mig_amount: FloatArray = mig_tables.free_compute_table().astype(np.float64) * MIG_UNIT

    # ------------------------------------------------------------------ per-GPU summaries
    def amounts(self, rows: IntArray) -> FloatArray:
        c = self.cluster
        free = c.gpu_free[rows]
        if not c.mig_gpus:
            return np.maximum(free, 0).astype(np.float64)
        out: FloatArray = np.where(c.shared_gpu[rows], np.maximum(free, 0), self.mig_amount[c.mig_state[rows]])
        return out

    def fits_shared(self, model: IntArray, free: IntArray) -> BoolArray:
        """Per class: can a shared-mode GPU of ``model`` with ``free`` milli host it?"""
        out: BoolArray = self.model_ok[model + 1] & (free[..., None] >= self.milli) & (self.milli > 0)
        return out

    def fits_mig(self, model: IntArray, state: IntArray) -> BoolArray:
        out: BoolArray = self.model_ok[model + 1] & self.mig_fits[state]
        return out

    def fits(self, rows: IntArray) -> BoolArray:
        c = self.cluster
        model = c.gpu_model[rows]
        if not c.mig_gpus:
            return self.fits_shared(model, c.gpu_free[rows])
        out: BoolArray = self.fits_shared(model, c.gpu_free[rows]) | self.fits_mig(model, c.mig_state[rows])
        return out

    # ------------------------------------------------------------------ node terms
    def terms(self, rows: IntArray) -> tuple[FloatArray, FloatArray, FloatArray, BoolArray, FloatArray]:
        """(count[d,M], S[d,M], T[d], fits[d,G,M], a[d,G]) for the nodes ``rows``."""
        a = self.amounts(rows)
        f = self.fits(rows)
        count = f.sum(axis=1).astype(np.float64)
        s = (a[..., None] * ~f).sum(axis=1)
        t = a.sum(axis=1)
        return count, s, t, f, a

    def frag(self, count: FloatArray, s: FloatArray, t: FloatArray, cpu: IntArray | FloatArray) -> FloatArray:
        """F_n from node terms; leading dimensions broadcast."""
        ok = (np.asarray(cpu)[..., None] >= self.cpu) & (count >= self.count) & self.is_gpu_class
        out: FloatArray = (np.where(ok, s, t[..., None]) * self.p).sum(axis=-1)
        return out

    def node_frag(self, rows: IntArray) -> FloatArray:
        count, s, t, _, _ = self.terms(rows)
        return self.frag(count, s, t, self.cluster.cpu_free[rows])

    def total(self) -> float:
        """Cluster fragmentation amount F = sum_n F_n (milli)."""
        return float(self.node_frag(np.arange(len(self.cluster.names))).sum())

    # ------------------------------------------------------------------ hypothetical changes
    def delta(self, rows: IntArray, request: Request,
              terms: tuple[FloatArray, FloatArray, FloatArray, BoolArray, FloatArray] | None = None
              ) -> tuple[FloatArray, IntArray, IntArray]:
        """Increase of F_n if ``request`` went to each node of ``rows``.

        Returns ``(dF[d], slot[d], start[d])``: the best single GPU slot / MIG start for shared and
        single-GPU MIG requests (-1 otherwise); dF is +inf where the request does not fit the GPUs.
        Whole-GPU requests take the lowest-index free GPUs (§4: "assumed to take the fully-free
        GPUs"); multi-GPU MIG requests take the lowest-index GPUs with a legal start.
        """
        c = self.cluster
        none = np.full(len(rows), -1, dtype=np.int64)
        count, s, t, fits, a = self.terms(rows) if terms is None else terms
        cpu = c.cpu_free[rows]
        f0 = self.frag(count, s, t, cpu)
        cpu2 = cpu - request.cpu_milli
        if request.kind is RequestKind.CPU_ONLY:
            return self.frag(count, s, t, cpu2) - f0, none, none
        before = _Before(rows, (count, s, t), GpuSummary(fits, a), f0, cpu2, c.gpu_candidates(request, rows))
        if request.kind is RequestKind.SHARED:
            df, slot = self._delta_shared(before, request)
            return df, slot, none
        if request.kind is RequestKind.MIG and request.gpu_count == 1:
            return self._delta_one_mig(before, request)
        return self._delta_gpus(before, request), none, none

    def _delta_shared(self, before: _Before, request: Request) -> tuple[FloatArray, IntArray]:
        """dF and the best GPU slot for a shared-GPU request."""
        c = self.cluster
        count, s, t = before.node
        free2 = c.gpu_free[before.rows] - request.gpu_milli
        fits2 = self.fits_shared(c.gpu_model[before.rows], free2)
        a2 = np.maximum(free2, 0).astype(np.float64)
        df = self._after_one((count[:, None], s[:, None], t[:, None]), before.gpu, GpuSummary(fits2, a2),
                             before.cpu2[:, None])
        df = df - before.f0[:, None]
        df = np.where(before.cand, df, INF)
        slot: IntArray = df.argmin(axis=1)
        return df[np.arange(len(before.rows)), slot], slot

    def _delta_one_mig(self, before: _Before, request: Request) -> tuple[FloatArray, IntArray, IntArray]:
        """dF, the best GPU slot and its MIG start for a single-GPU MIG request."""
        assert request.mig_profile is not None
        c = self.cluster
        rows, d = before.rows, len(before.rows)
        count, s, t = before.node
        after, start = mig_tables.transitions(request.mig_profile)
        st = c.mig_state[rows]
        nxt = after[st]  # [d, G, K]
        legal = (nxt >= 0) & before.cand[..., None]
        nxt_safe = np.where(nxt >= 0, nxt, mig_tables.NO_MIG)
        fits2 = self.fits_mig(c.gpu_model[rows][..., None], nxt_safe)  # [d, G, K, M]
        a2 = self.mig_amount[nxt_safe]
        df = self._after_one((count[:, None, None], s[:, None, None], t[:, None, None]),
                             GpuSummary(before.gpu.fits[:, :, None], before.gpu.a[..., None]), GpuSummary(fits2, a2),
                             before.cpu2[:, None, None])
        df = df - before.f0[:, None, None] + layout_tie_break()[nxt_safe]
        df = np.where(legal, df, INF)
        flat = df.reshape(d, -1).argmin(axis=1)
        slot, k = np.divmod(flat, nxt.shape[2])
        best = df.reshape(d, -1)[np.arange(d), flat]
        return best, slot, start[st[np.arange(d), slot], k]

    def _delta_gpus(self, before: _Before, request: Request) -> FloatArray:
        """dF for whole GPUs (or k MIG instances): the lowest-index suitable GPUs."""
        c = self.cluster
        rows = before.rows
        count, s, t = before.node
        fits, a = before.gpu.fits, before.gpu.a
        k = request.gpu_count
        chosen = before.cand & (np.cumsum(before.cand, axis=1) <= k)
        enough = before.cand.sum(axis=1) >= k
        if request.kind is RequestKind.WHOLE:
            fits2 = np.zeros_like(fits)
            a2 = np.zeros_like(a)
        else:
            assert request.mig_profile is not None
            after, _start = mig_tables.transitions(request.mig_profile)
            nxt = after[c.mig_state[rows], 0]
            nxt = np.where(chosen & (nxt >= 0), nxt, c.mig_state[rows])
            fits2 = self.fits_mig(c.gpu_model[rows], nxt)
            a2 = self.mig_amount[nxt]
        ch = chosen[..., None]
        count2 = count - (fits & ch).sum(axis=1) + (fits2 & ch).sum(axis=1)
        s2 = s - (a[..., None] * (~fits & ch)).sum(axis=1) + (a2[..., None] * (~fits2 & ch)).sum(axis=1)
        t2 = t - ((a - a2) * chosen).sum(axis=1)
        out: FloatArray = np.where(enough, self.frag(count2, s2, t2, before.cpu2) - before.f0, INF)
        return out

    def _after_one(self, node: tuple[FloatArray, FloatArray, FloatArray], gpu: GpuSummary, gpu2: GpuSummary,
                   cpu2: IntArray) -> FloatArray:
        """F_n after one GPU changes from ``gpu`` to ``gpu2``; ``node`` is (count, S, T) and the
        arguments broadcast (``count``, ``S`` and the ``fits`` carry the class axis last)."""
        count, s, t = node
        count2 = count - gpu.fits + gpu2.fits
        s2 = s - gpu.a[..., None] * ~gpu.fits + gpu2.a[..., None] * ~gpu2.fits
        return self.frag(count2, s2, t - gpu.a + gpu2.a, cpu2)


@dataclass(frozen=True)
class GpuSummary:
    """GPUs as F_n sees them: per class, can the GPU host it (``fits``), and its free amount ``a``."""

    fits: BoolArray
    a: FloatArray


@dataclass(frozen=True)
class _Before:
    """The nodes ``rows`` before a hypothetical placement: their terms (count, S, T), their GPUs,
    F_n, the CPU the request would leave free, and the GPUs that may take it (``cand``)."""

    rows: IntArray
    node: tuple[FloatArray, FloatArray, FloatArray]
    gpu: GpuSummary
    f0: FloatArray
    cpu2: IntArray
    cand: BoolArray


class NodeTerms:
    """The terms of F_n for every node, recomputed only for nodes whose version moved."""

    def __init__(self, model: FragModel) -> None:
        self.model = model
        c = model.cluster
        n, g, m = len(c.names), c.max_gpus, len(model.p)
        self.version = np.full(n, -1, dtype=np.int64)
        self.count = np.zeros((n, m))
        self.s = np.zeros((n, m))
        self.t = np.zeros(n)
        self.fits = np.zeros((n, g, m), dtype=np.bool_)
        self.a = np.zeros((n, g))

    def refresh(self) -> None:
        c = self.model.cluster
        dirty = np.flatnonzero(self.version != c.version)
        if len(dirty):
            self.count[dirty], self.s[dirty], self.t[dirty], self.fits[dirty], self.a[dirty] = self.model.terms(dirty)
            self.version[dirty] = c.version[dirty]

    def of(self, rows: IntArray) -> tuple[FloatArray, FloatArray, FloatArray, BoolArray, FloatArray]:
        return self.count[rows], self.s[rows], self.t[rows], self.fits[rows], self.a[rows]

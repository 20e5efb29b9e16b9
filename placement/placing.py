"""The engine's one decision: where a request goes under a policy, or why it cannot go anywhere.

It sits above the cluster state (``cluster``), the rejection reasons (``explain``) and the
policies, which all read the cluster state; so the engine's modules import one way:
data, then policies and explanations, then this.
"""

from __future__ import annotations

import numpy as np

from . import mig_tables
from .arrays import IntArray
from .cluster import Cluster
from .decisions import Placement, Rejection, RejectionKind, Request, RequestKind
from .explain import explain_rejection
from .inventory import GPU_MILLI
from .policies import Policy, default_policy


def place(cluster: Cluster, request: Request, policy: Policy | None = None, *, explain: bool = True) -> Placement | Rejection:
    """Decide where ``request`` goes on ``cluster`` under ``policy``.

    Without a policy, one instance of the default policy is kept per cluster, so that it learns
    the workload from the requests it sees. Nothing is booked; call ``cluster.apply`` with the
    returned placement to reserve it. ``explain=False``: a caller that only wants to know whether
    it fits gets a rejection without the (costlier) reason.
    """
    problem = request.problem()
    if problem is not None:
        return Rejection(request, RejectionKind.INVALID, problem)
    feasible = cluster.feasible(request)
    if not feasible.any():
        if not explain:
            return Rejection(request, RejectionKind.for_request(request), "no room (not explained)")
        return explain_rejection(cluster, request)
    if policy is None:
        policy = cluster.cache.get("default-policy")
        if policy is None:
            policy = cluster.cache["default-policy"] = default_policy()
    node, slots, starts = policy.choose(cluster, request, feasible)
    labels = tuple(int(cluster.gpu_label[node, j]) for j in slots)
    return Placement(request, cluster.names[node], labels, tuple(starts), policy.name)


def free_units(cluster: Cluster, request: Request, limit: int) -> int | None:
    """How many units of ``request`` placing them one after another would book on ``cluster`` (at
    most ``limit``), counted without placing any; None where the count cannot be exact this way
    (an instance on each of several MIG GPUs, CPU-only requests, a MIG state whose count depends on
    where instances start): place them one by one then.

    The sequence it mirrors: ``place`` then ``cluster.apply``, unit after unit, until ``place``
    rejects one (or ``limit`` units are booked), under any policy. Why the count is the same, for
    a share of one GPU (``RequestKind.SHARED``, ``gpu_milli`` = s), k whole GPUs
    (``RequestKind.WHOLE``) or one MIG instance of profile p (``RequestKind.MIG``, one GPU):

    * ``place`` rejects a well-formed request exactly when no node is feasible
      (``Cluster.feasible``); a policy only chooses among feasible nodes, and ``apply`` refuses a
      placement on a GPU that cannot take its part, so every booked unit lands on a feasible node.
    * Give node n the number u(n) = min(free CPU // cpu, free memory // memory, g(n)), where, over
      its GPUs of the allowed models, g(n) is Σ free // s over those with free ≥ s (a share), the
      number of free whole GPUs // k (whole GPUs), or Σ ``mig_tables.chain_counts(p)`` of their
      MIG states (an instance). Node n is feasible exactly when u(n) ≥ 1: that is
      ``resource_fit`` and ``gpu_fit`` (whose per-node shortcut through ``max_free``/
      ``full_count`` agrees with the per-GPU test where it is taken; a MIG state's chain count is
      at least one exactly where p has a legal start).
    * Booking one unit on node n, wherever on n the policy puts it, lowers u(n) by exactly one and
      no other node's u: the CPU and memory terms drop by one; a share takes s from one GPU with
      free f ≥ s, and (f - s) // s = f // s - 1; k whole GPUs go from free to none; an instance
      started anywhere legal lowers its GPU's chain count by exactly one (what the table checks
      for every state it does not call UNSURE). The tags the policies read are not in u.

    So whatever the policy chooses, every placement lowers Σ u by one, and the sequence stops when
    no node is feasible, that is when Σ u = 0: it books min(limit, Σ u) units. Where units would go
    is the policy's business; the count is not. A resource the unit does not ask for (cpu = 0)
    sets no bound."""
    kind = request.kind
    if kind not in (RequestKind.SHARED, RequestKind.WHOLE, RequestKind.MIG):
        return None
    if kind is RequestKind.MIG and request.gpu_count != 1:
        return None
    if request.problem() is not None or limit <= 0:
        return 0
    units = _gpu_units(cluster, request)
    if units is None:
        return None
    for left, need in ((cluster.cpu_free, request.cpu_milli), (cluster.mem_free, request.memory_mib)):
        units = np.minimum(units, np.maximum(left, 0) // need) if need > 0 else np.where(left >= 0, units, 0)
    return int(min(limit, int(units.sum())))


def _gpu_units(cluster: Cluster, request: Request) -> IntArray | None:
    """Per node, g(n) of ``free_units`` (None: a MIG state the chain table calls UNSURE)."""
    gpu_ok = cluster.model_masks(request.allowed_models)[0]
    free = cluster.gpu_free
    if request.kind is RequestKind.SHARED:
        units: IntArray = np.where(gpu_ok & (free >= request.gpu_milli), free // request.gpu_milli, 0).sum(axis=1)
        return units
    if request.kind is RequestKind.WHOLE:
        units = (gpu_ok & (free == GPU_MILLI)).sum(axis=1) // request.gpu_count
        return units
    assert request.mig_profile is not None
    chains = np.where(gpu_ok, mig_tables.chain_counts(request.mig_profile)[cluster.mig_state], 0)
    if (chains == mig_tables.UNSURE).any():
        return None
    units = chains.sum(axis=1)
    return units

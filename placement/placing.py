"""The engine's one decision: where a request goes under a policy, or why it cannot go anywhere.

It sits above the cluster state (``cluster``), the rejection reasons (``explain``) and the
policies, which all read the cluster state; so the engine's modules import one way:
data, then policies and explanations, then this.
"""

from __future__ import annotations

from .cluster import Cluster
from .decisions import Placement, Rejection, RejectionKind, Request
from .explain import explain_rejection
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

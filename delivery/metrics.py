"""The delivery's process metric: how long a change took to reach its cluster.

Observed by the worker that delivers a push (``delivery.outbox``), served with the other process
metrics (``observability.process``; under several processes through ``PROMETHEUS_MULTIPROC_DIR``).
"""

from __future__ import annotations

from prometheus_client import Histogram

# Seconds: an idle worker delivers within a second; the target at 20 approvals/s is p99 <= 5 s;
# a push retried after an outage takes minutes.
_LAG_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)

PUSH_LAG = Histogram(
    "gpuportal_push_lag_seconds",
    "From the change that asked for a push (an approval, a release, a setting) being recorded to the "
    "push that carried it succeeding on the cluster, by cluster and scope (project, cluster-wide).",
    ["cluster", "scope"], buckets=_LAG_BUCKETS, registry=None,
)  # fmt: skip


def push_lag_observe(*, cluster: str, scope: str, seconds: float) -> None:
    PUSH_LAG.labels(cluster=cluster, scope=scope).observe(max(seconds, 0.0))

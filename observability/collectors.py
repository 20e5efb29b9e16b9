"""The metrics read from the database when Prometheus scrapes (docs/observability.md, "Metrics").

What the database knows (quotas, allocations, pushes, node reports, the audit chain, utilisation
buckets) is read at scrape time: every gunicorn worker gives the same answer, nothing is kept in
process memory, and a restart loses nothing. Each family is one aggregate query (or two), so a
scrape costs the same number of queries however many departments, allocations and nodes there are.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from decimal import Decimal

from django.db.models import Count, Max, Min, Q
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from accounting.idle_models import OPEN_STATES, IdleAction, IdleCase, IdleState
from allocations.admission.reasons import WAITING_STATES, ReasonCode
from allocations.models import Allocation, AllocationState, Quota
from allocations.quotas.usage import quota_usages
from audit.models import AuditCheckpoint, AuditEvent
from clusters.models import Cluster, ClusterDrift, ClusterPush, PendingPodsRead, PushState
from custody.models import CustodyAlarm, CustodyNodeState
from delivery.pod_reasons import PodReasonCode
from kernel.clock import clock_now
from telemetry.models import AllocationUsage, NodeReportState

# A utilisation bucket older than this is not "now" any more: its allocation's activity is absent.
USAGE_FRESHNESS = datetime.timedelta(minutes=15)
_QUOTA_FIELDS = ("guaranteed", "limit", "effective_limit", "used")
_QUOTA_HELP = {
    "guaranteed": "The quota's guaranteed amount",
    "limit": "The quota's hard limit",
    "effective_limit": "The hard limit in force now (with the quota windows that apply now)",
    "used": "What the grants of the department's subtree that hold now (their interval contains now) count against "
    "the quota",
}


def _seconds(moment: datetime.datetime) -> float:
    return moment.timestamp()


class PortalCollector(Collector):
    """Every scrape-time family; ``now`` is fixed by tests."""

    def __init__(self, *, now: datetime.datetime | None = None) -> None:
        self._now = now

    def collect(self) -> Iterator[Metric]:
        now = self._now or clock_now()
        yield from quota_families(now=now)
        yield from allocation_families(now=now)
        yield from waiting_families()
        yield from pending_pod_families()
        yield from cluster_families()
        yield from node_families(now=now)
        yield from audit_families()
        yield from usage_families(now=now)
        yield from idle_families(now=now)
        yield from custody_families()


def quota_families(*, now: datetime.datetime) -> Iterator[Metric]:
    """Each quota now: what the grants holding now hold and the numbers the windows leave now
    (``allocations.admission.quota_usages``, as the quota API answers them)."""
    quotas = list(Quota.objects.select_related("department", "flavor").order_by("department__slug", "flavor__name"))
    per_flavor = {name: GaugeMetricFamily(
        f"gpuportal_quota_{name}_units", f"{_QUOTA_HELP[name]}, in units of the flavor.",
        labels=["department", "flavor", "sharing_mode"],
    ) for name in _QUOTA_FIELDS}  # fmt: skip
    totals = {name: GaugeMetricFamily(
        f"gpuportal_quota_{name}_gpu_equivalents", f"{_QUOTA_HELP[name]}, in GPU-equivalents (all flavors).",
        labels=["department"],
    ) for name in _QUOTA_FIELDS}  # fmt: skip
    for usage in quota_usages(quotas=quotas, at=now):
        quota = usage.quota
        values: dict[str, Decimal] = {
            "guaranteed": quota.guaranteed, "limit": quota.limit, "effective_limit": usage.effective_limit,
            "used": usage.in_use,
        }  # fmt: skip
        for name, value in values.items():
            if quota.flavor is None:
                totals[name].add_metric([quota.department.slug], float(value))
            else:
                labels = [quota.department.slug, quota.flavor.name, quota.flavor.sharing_mode]
                per_flavor[name].add_metric(labels, float(value))
    yield from per_flavor.values()
    yield from totals.values()


def allocation_families(*, now: datetime.datetime) -> Iterator[Metric]:
    counts = GaugeMetricFamily(
        "gpuportal_allocations", "Allocations in each state, per department.", labels=["department", "state"]
    )
    rows = (
        Allocation.objects.values("project__department__slug", "state")
        .annotate(n=Count("id"))
        .order_by("project__department__slug", "state")
    )
    for row in rows:
        counts.add_metric([row["project__department__slug"], row["state"]], row["n"])
    yield counts
    oldest = GaugeMetricFamily(
        "gpuportal_allocation_oldest_pending_age_seconds",
        "How long the department's oldest pending request has waited for a decision.",
        labels=["department"],
    )
    pending = (
        Allocation.objects.filter(state=AllocationState.PENDING)
        .values("project__department__slug")
        .annotate(first=Min("created_at"))
        .order_by("project__department__slug")
    )
    for row in pending:
        oldest.add_metric([row["project__department__slug"]], max(0.0, (now - row["first"]).total_seconds()))
    yield oldest


def waiting_families() -> Iterator[Metric]:
    """Requests that have not started, by the primary reason the periodic refresh last read
    (``allocations.admission.why_refresh``, docs/pending.md): one grouped query. Every code is
    given, 0 included, so that a rule can watch one grow; ``unread``: not read yet."""
    family = GaugeMetricFamily(
        "gpuportal_pending_requests",
        "Requests that have not started, by the primary reason last read (docs/pending.md); unread: not read yet.",
        labels=["reason"],
    )
    counts = dict(
        Allocation.objects.filter(state__in=WAITING_STATES).values_list("waiting_reason")
        .annotate(n=Count("id")).values_list("waiting_reason", "n").order_by()
    )
    for code in ReasonCode:
        family.add_metric([code.value], counts.get(code.value, 0))
    family.add_metric(["unread"], counts.get("", 0))
    yield family


def pending_pod_families() -> Iterator[Metric]:
    """Pods (and refused controllers) that wait on the clusters, by pod reason, as the last read of
    each tenant namespace found them (``delivery.pending_pods``): one query, no cluster call."""
    family = GaugeMetricFamily(
        "gpuportal_pending_pods",
        "Pods Pending on the clusters longer than the threshold, by pod reason, from the last read of each namespace "
        "(docs/pending.md).",
        labels=["reason"],
    )
    totals: dict[str, int] = {}
    for counts in PendingPodsRead.objects.values_list("counts", flat=True):
        for code, n in (counts or {}).items():
            totals[code] = totals.get(code, 0) + int(n)
    for code in PodReasonCode:
        family.add_metric([code.value], totals.get(code.value, 0))
    yield family


def cluster_families() -> Iterator[Metric]:
    clusters = list(
        Cluster.objects.order_by("name").annotate(
            queued=Count("pushes", filter=Q(pushes__state=PushState.PENDING), distinct=True),
        )
    )
    names = {str(cluster.pk): cluster.name for cluster in clusters}
    repairs = dict(ClusterDrift.objects.values_list("cluster_id").annotate(n=Count("id")).order_by())
    depth = GaugeMetricFamily("gpuportal_cluster_push_queue_depth", "Pushes not yet delivered.", labels=["cluster"])
    failed = CounterMetricFamily(
        "gpuportal_cluster_push_failures", "Pushes to the cluster that ended in an error.",
        labels=["cluster"],
    )
    repaired = CounterMetricFamily(
        "gpuportal_cluster_drift_repairs", "Objects found changed by hand on the cluster and re-applied.", labels=["cluster"]
    )
    synced = GaugeMetricFamily(
        "gpuportal_cluster_last_successful_sync_timestamp_seconds",
        "When a push last reached the cluster without error (Unix time).", labels=["cluster"],
    )
    for cluster in clusters:
        depth.add_metric([cluster.name], cluster.queued)
        failed.add_metric([cluster.name], cluster.push_failures)
        repaired.add_metric([cluster.name], repairs.get(cluster.pk, 0))
    last_done = (
        ClusterPush.objects.filter(state=PushState.DONE).values("cluster_id").annotate(at=Max("completed_at")).order_by()
    )
    for row in last_done:
        if row["at"] is not None and str(row["cluster_id"]) in names:
            synced.add_metric([names[str(row["cluster_id"])]], _seconds(row["at"]))
    yield from (depth, failed, repaired, synced)


def node_families(*, now: datetime.datetime) -> Iterator[Metric]:
    stale = GaugeMetricFamily(
        "gpuportal_node_report_stale", "1 when the node agent's reports stopped (stale), else 0.", labels=["cluster", "node"]
    )
    last = GaugeMetricFamily(
        "gpuportal_node_last_report_timestamp_seconds", "When the node's last report was accepted (Unix time).",
        labels=["cluster", "node"],
    )
    states = NodeReportState.objects.values_list("node__cluster__name", "node__name", "stale_at", "received_at").order_by(
        "node__cluster__name", "node__name"
    )
    for cluster, node, stale_at, received_at in states:
        stale.add_metric([cluster, node], 1.0 if stale_at is None or now >= stale_at else 0.0)
        if received_at is not None:
            last.add_metric([cluster, node], _seconds(received_at))
    yield from (stale, last)


def audit_families() -> Iterator[Metric]:
    head = GaugeMetricFamily("gpuportal_audit_chain_head_sequence", "Sequence number of the newest audit event.")
    head.add_metric([], float(AuditEvent.objects.aggregate(seq=Max("seq"))["seq"] or 0))
    yield head
    checkpoint = GaugeMetricFamily(
        "gpuportal_audit_last_checkpoint_timestamp_seconds", "When the newest signed audit checkpoint was made (Unix time)."
    )
    newest = AuditCheckpoint.objects.order_by("-number").values_list("created_at", flat=True).first()
    if newest is not None:
        checkpoint.add_metric([], _seconds(newest))
    yield checkpoint


def usage_families(*, now: datetime.datetime) -> Iterator[Metric]:
    """The newest utilisation bucket of each allocation (telemetry.models.AllocationUsage), when it
    is recent; a measured source (dcgm-exporter, HAMi) wins over the node agent's for one bucket."""
    labels = ["allocation", "cluster", "department", "project"]
    activity = GaugeMetricFamily(
        "gpuportal_allocation_gpu_activity_ratio", "Busy fraction (0..1) of the allocation's devices, newest 5 minutes.",
        labels=labels,
    )
    granted = GaugeMetricFamily(
        "gpuportal_allocation_granted_gpu_equivalents", "GPU-equivalents the allocation held, newest 5 minutes.",
        labels=labels,
    )
    department_granted = GaugeMetricFamily(
        "gpuportal_department_granted_gpu_equivalents", "GPU-equivalents the department's allocations held, newest 5 minutes.",
        labels=["cluster", "department"],
    )
    department_used = GaugeMetricFamily(
        "gpuportal_department_used_gpu_equivalents",
        "GPU-equivalents the department's allocations kept busy, newest 5 minutes (known buckets only).",
        labels=["cluster", "department"],
    )
    since = now - USAGE_FRESHNESS
    newest = AllocationUsage.objects.filter(bucket_start__gte=since).aggregate(at=Max("bucket_start"))["at"]
    if newest is not None:
        rows = (
            AllocationUsage.objects.filter(bucket_start=newest)
            .values_list(
                "allocation_id", "cluster__name", "department__slug", "allocation__project__slug", "source", "activity",
                "granted_gpu_eq",
            )
            .order_by("allocation_id", "source")
        )
        best: dict[int, tuple[str, str, str, str, float | None, float]] = {}
        for allocation_id, cluster, department, project, source, value, held in rows:
            if allocation_id not in best or best[allocation_id][3] == "agent":
                best[allocation_id] = (cluster, department, project, source, value, held)
        sums: dict[tuple[str, str], list[float]] = {}
        for allocation_id, (cluster, department, project, _source, value, held) in sorted(best.items()):
            names = [str(allocation_id), cluster, department, project]
            granted.add_metric(names, held)
            entry = sums.setdefault((cluster, department), [0.0, 0.0])
            entry[0] += held
            if value is not None:
                activity.add_metric(names, value)
                entry[1] += value * held
        for (cluster, department), (held_total, used_total) in sorted(sums.items()):
            department_granted.add_metric([cluster, department], held_total)
            department_used.add_metric([cluster, department], used_total)
    yield from (activity, granted, department_granted, department_used)



def idle_families(*, now: datetime.datetime) -> Iterator[Metric]:
    """The open idle cases (accounting.idle) per department and state, and those whose action is
    due but waits for known data (the readings stopped after the warning)."""
    cases = GaugeMetricFamily(
        "gpuportal_idle_cases", "Open idle cases: grants observed or warned as idle.", labels=["department", "state"]
    )
    waiting = GaugeMetricFamily(
        "gpuportal_idle_cases_waiting_for_data",
        "Warned idle cases of reclaim policies past their deadline whose grace still lacks known idle readings.",
        labels=["department"],
    )
    counts = (
        IdleCase.objects.filter(state__in=sorted(OPEN_STATES))
        .values_list("allocation__project__department__slug", "state").annotate(count=Count("pk")).order_by()
    )  # fmt: skip
    for department, state, count in sorted(counts):
        cases.add_metric([department, state], count)
    due = (
        IdleCase.objects.filter(state=IdleState.WARNED, action_due_at__lte=now, policy__action=IdleAction.RECLAIM)
        .values_list("allocation__project__department__slug").annotate(count=Count("pk")).order_by()
    )  # fmt: skip
    for department, count in sorted(due):
        waiting.add_metric([department], count)
    yield from (cases, waiting)


def custody_families() -> Iterator[Metric]:
    """The custody ledger's raised mismatch alarms per node and kind (docs/custody.md), and the
    nodes whose custody is unknown now (a gap open: an error, a restart not yet reported, a silence)."""
    alarms = GaugeMetricFamily(
        "gpuportal_custody_alarms", "Custody mismatch alarms raised now (ungranted, foreign_project, grant_unused, "
        "reports_stopped).", labels=["cluster", "node", "kind"],
    )  # fmt: skip
    counts = (
        CustodyAlarm.objects.values_list("node__cluster__name", "node__name", "kind").annotate(count=Count("pk")).order_by()
    )
    for cluster, node, kind, count in sorted(counts, key=lambda row: tuple(str(part) for part in row)):
        alarms.add_metric([cluster or "", node or "", kind], count)
    unknown = GaugeMetricFamily(
        "gpuportal_custody_unknown_nodes", "Nodes whose custody is unknown now (a gap in their reports is open)."
    )
    unknown.add_metric([], CustodyNodeState.objects.filter(gap_since__isnull=False).count())
    yield from (alarms, unknown)

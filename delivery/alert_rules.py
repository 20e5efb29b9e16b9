"""The portal's Prometheus alert rules, as a rule file body and as a PrometheusRule. Pure.

Eight alerts (docs/observability.md, "Alerts"): the seeds' ``GPUOverload`` (a GPU busy over 90 %
for 10 minutes, from dcgm-exporter) and ``VGPUQuotaExhausted`` (a department's quota used up),
plus ``GPUGrantedButIdle``, ``AllocationPendingTooLong``, ``PendingReasonGrowing``, ``ClusterSyncFailing``,
``NodeReportStale`` and ``AuditCheckpointStale`` over the portal's own ``/metrics``. Thresholds
come in an :class:`AlertThresholds` (read from the settings by ``delivery.alert_settings``); the
annotations use only ``$labels`` so that their text is fixed by the labels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from clusters.dcgm import GENERATIONS
from delivery.rendering import MANAGED_BY_LABEL, MANAGED_BY_VALUE, SCOPE_CLUSTER, SCOPE_LABEL
from kernel.words import counted

RULE_NAME = "gpuportal-alerts"
GROUP_ALERTS = "gpuportal.alerts"
GPU_BUSY_RECORD = "gpuportal:gpu_busy:ratio"
# One device: a whole GPU (UUID) or a MIG instance of it (UUID, GPU_I_ID).
DEVICE_KEY = "UUID, GPU_I_ID"
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


@dataclass(frozen=True)
class AlertThresholds:
    gpu_overload_ratio: float = 0.9
    gpu_overload_for: str = "10m"
    quota_exhausted_ratio: float = 1.0
    quota_exhausted_for: str = "5m"
    idle_below_ratio: float = 0.05
    idle_for: str = "2h"
    pending_seconds: int = 4 * 3600
    pending_for: str = "5m"
    pending_growth: int = 10
    pending_growth_for: str = "15m"
    sync_failures: int = 3
    sync_stale_seconds: int = 900
    sync_for: str = "5m"
    node_stale_for: str = "5m"
    checkpoint_age_seconds: int = 600
    checkpoint_for: str = "5m"

    def problems(self) -> list[str]:
        """What is wrong with these thresholds, by field name (empty when nothing)."""
        found = [f"{name}: {value!r} is not a Prometheus duration such as 5m or 1h30m"
                 for name, value in vars(self).items() if name.endswith("_for") and not DURATION.match(str(value))]  # fmt: skip
        for name in ("gpu_overload_ratio", "idle_below_ratio"):
            if not 0 < getattr(self, name) <= 1:
                found.append(f"{name}: must be above 0 and at most 1")
        if self.quota_exhausted_ratio <= 0:
            found.append("quota_exhausted_ratio: must be above 0")
        for name in ("pending_seconds", "pending_growth", "sync_stale_seconds", "checkpoint_age_seconds"):
            if getattr(self, name) <= 0:
                found.append(f"{name}: must be a positive number of seconds")
        if self.sync_failures < 0:
            found.append("sync_failures: must not be negative")
        return found


def _number(value: float) -> str:
    return format(value, "g")


def gpu_busy_expression() -> str:
    """A device's busy fraction from the best series its exporter has: SM activity, else graphics
    engine activity, else "a kernel ran" (not supported on MIG), newest exporter generation first.
    ``max`` per device, never ``sum``: with per-pod labels on a shared GPU dcgm-exporter repeats the
    device's PROF_* series once per pod."""
    terms: list[str] = []
    # series first, generation second: an older exporter's SM activity beats a newer one's GPU utilisation
    terms += [f"max by ({DEVICE_KEY}) ({names.sm_active})" for names in GENERATIONS]
    terms += [f"max by ({DEVICE_KEY}) ({names.gr_engine_active})" for names in GENERATIONS]
    terms += [f"max by ({DEVICE_KEY}) ({names.gpu_util}) * {_number(names.gpu_util_to_ratio)}" for names in GENERATIONS]
    return "clamp_max(" + " or ".join(terms) + ", 1)"


def _alert(name: str, expr: str, duration: str, severity: str, summary: str, description: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": duration,
        "labels": {"severity": severity},
        "annotations": {"summary": summary, "description": description},
    }


def alert_groups(thresholds: AlertThresholds) -> list[dict[str, Any]]:
    """The rule groups (a rule file's ``groups``, a PrometheusRule's ``spec.groups``)."""
    alerts = [*_usage_alerts(thresholds), *_operations_alerts(thresholds), *_custody_alerts()]
    # One group: rules of a group run in order at each evaluation, so GPUOverload reads the busy
    # fraction recorded at the same instant (groups run independently of each other).
    return [{"name": GROUP_ALERTS, "rules": [{"record": GPU_BUSY_RECORD, "expr": gpu_busy_expression()}, *alerts]}]


def _usage_alerts(t: AlertThresholds) -> list[dict[str, Any]]:
    """How the GPUs, quotas and requests are used: overload, quota exhausted, idle grants, waits."""
    pct = _number(round(t.gpu_overload_ratio * 100, 2))
    idle_pct = _number(round(t.idle_below_ratio * 100, 2))
    quota_ratio = _number(t.quota_exhausted_ratio)
    return [
        _alert(
            "GPUOverload", f"{GPU_BUSY_RECORD} > {_number(t.gpu_overload_ratio)}", t.gpu_overload_for, "warning",
            "GPU {{ $labels.UUID }} busy over " + pct + " % for " + t.gpu_overload_for,
            "The device {{ $labels.UUID }} (a MIG instance of it when GPU_I_ID is set) has been busy over " + pct
            + " % for " + t.gpu_overload_for + ". If it is shared (MPS, time-slicing, HAMi), its tenants slow each other"
            " down: open the cluster's GPU map in the portal (/platform/clusters/{id}/) to see whose units it holds, and move the noisiest "
            "allocation to its own GPU (resize or renew it onto an exclusive flavor) or let defragmentation spread it.",
        ),
        _alert(
            "VGPUQuotaExhausted",
            f"gpuportal_quota_used_units / (gpuportal_quota_effective_limit_units > 0) >= {quota_ratio}"
            ' or label_replace(label_replace(gpuportal_quota_used_gpu_equivalents'
            f" / (gpuportal_quota_effective_limit_gpu_equivalents > 0) >= {quota_ratio},"
            ' "flavor", "gpu-equivalents", "", ""), "sharing_mode", "all flavors", "", "")',
            t.quota_exhausted_for, "warning",
            "Department {{ $labels.department }} has used its {{ $labels.flavor }} quota",
            "The department {{ $labels.department }} holds all it may of {{ $labels.flavor }} "
            "({{ $labels.sharing_mode }}): its new requests wait or borrow. Its admins can release idle grants "
            "(the utilisation page shows which), or a platform admin can raise the quota or open a quota window "
            "(PATCH /api/v1/quotas/{id}, POST /api/v1/quota-windows).",
        ),
        _alert(
            "GPUGrantedButIdle", f"gpuportal_allocation_gpu_activity_ratio < {_number(t.idle_below_ratio)}", t.idle_for,
            "info",
            "Allocation {{ $labels.allocation }} of {{ $labels.department }} idle for " + t.idle_for,
            "Allocation {{ $labels.allocation }} (project {{ $labels.project }}, cluster {{ $labels.cluster }}) has "
            "kept its GPUs below " + idle_pct + " % busy for " + t.idle_for + " while others may wait. Ask its owner to "
            "release it (POST /api/v1/allocations/{{ $labels.allocation }}/release/) or shrink it; unknown data never "
            "counts as idle.",
        ),
        _alert(
            "AllocationPendingTooLong", f"gpuportal_allocation_oldest_pending_age_seconds > {t.pending_seconds}",
            t.pending_for, "warning",
            "A request of {{ $labels.department }} has waited over " + _duration_words(t.pending_seconds),
            "The oldest pending request of {{ $labels.department }} has waited more than "
            + _duration_words(t.pending_seconds) + " for a decision. Its department admins decide on the approvals "
            "page (/approvals/); if they are away, a platform admin can.",
        ),
        _alert(
            "PendingReasonGrowing",
            f'delta(gpuportal_pending_requests{{reason!="unread"}}[1h]) > {t.pending_growth}',
            t.pending_growth_for, "warning",
            "Requests waiting for {{ $labels.reason }} grew by over " + str(t.pending_growth) + " in an hour",
            "More than " + str(t.pending_growth) + " more requests wait for the same reason ({{ $labels.reason }}, "
            "docs/pending.md) than an hour ago. Open one of them (GET /api/v1/allocations/{id}/why/, or its page) "
            "for the numbers: a quota too small for demand (raise it or open a quota window), no room on the GPUs "
            "(add nodes or free idle grants), nodes below a flavor's driver minimum, or a cluster that does not "
            "take pushes.",
        ),
    ]


def _operations_alerts(t: AlertThresholds) -> list[dict[str, Any]]:
    """How the portal's own machinery runs: pushes to clusters, node agents, audit checkpoints."""
    return [
        _alert(
            "ClusterSyncFailing",
            f"increase(gpuportal_cluster_push_failures_total[15m]) > {t.sync_failures}"
            f" or (gpuportal_cluster_push_queue_depth > 0 and on (cluster)"
            f" (time() - gpuportal_cluster_last_successful_sync_timestamp_seconds) > {t.sync_stale_seconds})",
            t.sync_for, "critical",
            "Pushes to cluster {{ $labels.cluster }} are failing",
            "The portal cannot bring cluster {{ $labels.cluster }} to its desired state: approved grants do not "
            "reach it. Read the cluster's last sync error (GET /api/v1/clusters/{id}/, the cluster admin page), fix the "
            "credentials or the API server's reachability, then sync it (POST /api/v1/clusters/{id}/sync/).",
        ),
        _alert(
            "NodeReportStale", "gpuportal_node_report_stale == 1", t.node_stale_for, "warning",
            "Node {{ $labels.node }} of {{ $labels.cluster }} stopped reporting",
            "The GPU node agent on {{ $labels.node }} ({{ $labels.cluster }}) has not reported for longer than "
            "three intervals: its GPUs' utilisation is unknown and MIG changes on it are unconfirmed. Check the "
            "agent's DaemonSet pod on that node (kubectl -n gpuportal logs) and its node token.",
        ),
        _alert(
            "AuditCheckpointStale",
            # The second term is the absent() guard: a portal that is scraped (its chain head is there) but
            # has never made a checkpoint has no timestamp series, which the first term can never see.
            f"time() - gpuportal_audit_last_checkpoint_timestamp_seconds > {t.checkpoint_age_seconds}"
            " or (absent(gpuportal_audit_last_checkpoint_timestamp_seconds)"
            " and on() gpuportal_audit_chain_head_sequence)",
            t.checkpoint_for, "critical",
            "No audit checkpoint for over " + _duration_words(t.checkpoint_age_seconds) + ", or none ever",
            "The audit log has not been checkpointed for more than " + _duration_words(t.checkpoint_age_seconds)
            + ", or has never been: events since the last signed checkpoint are not yet provable. Check that "
            "Celery beat and a worker run (the audit-checkpoint-publish task) or, without a broker, that the "
            "serving process runs (its checkpoint heartbeat), or publish one by hand (manage.py audit_checkpoint).",
        ),
    ]


def _duration_words(seconds: int) -> str:
    if seconds % 3600 == 0:
        hours = seconds // 3600
        return counted(hours, "hour")
    if seconds % 60 == 0:
        minutes = seconds // 60
        return counted(minutes, "minute")
    return f"{seconds} seconds"


def render_rule_file(thresholds: AlertThresholds) -> dict[str, Any]:
    """A plain Prometheus rule file (``rule_files:``)."""
    return {"groups": alert_groups(thresholds)}


def render_prometheus_rule(thresholds: AlertThresholds, *, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """The Prometheus Operator's PrometheusRule; ``labels`` are what the Prometheus's ruleSelector
    matches (the portal's own labels win over them)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": RULE_NAME,
            "namespace": namespace,
            "labels": {**labels, MANAGED_BY_LABEL: MANAGED_BY_VALUE, SCOPE_LABEL: SCOPE_CLUSTER},
        },
        "spec": {"groups": alert_groups(thresholds)},
    }


def _custody_alarm(kind: str) -> str:
    return f'gpuportal_custody_alarms{{kind="{kind}"}} > 0'


def _custody_alerts() -> list[dict[str, Any]]:
    """The custody ledger's mismatch alarms (docs/custody.md): each raised alarm is an audit event
    and a ``gpuportal_custody_alarms`` series while it holds."""
    return [
        _alert(
            "CustodyGpuWithoutGrant", _custody_alarm("ungranted"), "1m", "critical",
            "A GPU on {{ $labels.node }} of {{ $labels.cluster }} is used with no grant",
            "A pod holds a GPU on {{ $labels.node }} ({{ $labels.cluster }}) that no grant of its project is booked "
            "on. The audit log's custody.alarm_raised event names the pod and the device; the custody API answers "
            "who held it (GET /api/v1/custody/?device=...).",
        ),
        _alert(
            "CustodyForeignProject", _custody_alarm("foreign_project"), "1m", "critical",
            "A pod on {{ $labels.node }} of {{ $labels.cluster }} holds another project's GPU",
            "A pod of one project holds a GPU on {{ $labels.node }} ({{ $labels.cluster }}) that is booked to "
            "another project's grant. The audit log's custody.alarm_raised event names both.",
        ),
        _alert(
            "CustodyGrantUnused", _custody_alarm("grant_unused"), "1h", "info",
            "A grant on {{ $labels.node }} of {{ $labels.cluster }} is held by none of its project's pods",
            "A grant's booked GPUs on {{ $labels.node }} ({{ $labels.cluster }}) have been held by no pod of its "
            "project for an hour: the idle detection (GPUGrantedButIdle, the idle cases) decides what follows.",
        ),
        _alert(
            "CustodyReportsStopped", _custody_alarm("reports_stopped"), "1m", "warning",
            "Custody on {{ $labels.node }} of {{ $labels.cluster }} is unknown: its reports stopped",
            "The node agent on {{ $labels.node }} ({{ $labels.cluster }}) stopped reporting: the custody ledger "
            "records a gap from its last report until it reports again; nothing is attributed meanwhile.",
        ),
    ]

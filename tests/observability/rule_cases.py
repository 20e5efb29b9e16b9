"""The ``promtool test rules`` cases of every alert, and the test file they make.

Each case feeds series at one-minute steps and evaluates the alert one step before the edge of its
``for:`` window (nothing may fire) and at the edge (it fires, with exactly these labels and
annotations). The file is committed as ``deploy/prometheus/gpuportal-rules.test.yml`` so that
``promtool test rules deploy/prometheus/gpuportal-rules.test.yml`` runs without the portal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from delivery.alert_rules import AlertThresholds, alert_groups

PORTAL = {"job": "gpuportal", "instance": "portal:8000"}


@dataclass(frozen=True)
class Case:
    alert: str
    series: list[tuple[str, str]]  # (series selector, promtool values)
    quiet_at: str  # one step before the edge: nothing fires
    fires_at: str
    fired: list[dict[str, str]] = field(default_factory=list)  # the labels of each alert that fires
    name: str = ""  # the promtool test's name when an alert has several cases (default: the alert)


def _selector(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ", ".join(f'{key}="{value}"' for key, value in sorted(labels.items())) + "}"


def _portal(name: str, **labels: str) -> str:
    return _selector(name, {**PORTAL, **labels})


CASES: list[Case] = [
    Case(
        "GPUOverload",
        [
            # A whole GPU on an exporter without profiling metrics: GPU_UTIL in percent.
            (_selector("DCGM_FI_DEV_GPU_UTIL", {"UUID": "GPU-whole", "gpu": "0", "Hostname": "n1"}), "95x20"),
            # A MIG instance: GPU_UTIL is not supported there, SM activity is (and may exceed 1: clamped).
            (_selector("DCGM_FI_PROF_SM_ACTIVE", {"UUID": "GPU-mig", "GPU_I_ID": "3", "GPU_I_PROFILE": "3g.40gb"}),
             "1.2x20"),
            # A time-sliced GPU: the device's PROF series repeated per pod; summed it would be 1.0.
            (_selector("DCGM_FI_PROF_SM_ACTIVE", {"UUID": "GPU-shared", "pod": "a", "namespace": "nlp-llm"}), "0.5x20"),
            (_selector("DCGM_FI_PROF_SM_ACTIVE", {"UUID": "GPU-shared", "pod": "b", "namespace": "nlp-llm"}), "0.5x20"),
        ],
        quiet_at="9m", fires_at="10m",
        fired=[{"UUID": "GPU-mig", "GPU_I_ID": "3"}, {"UUID": "GPU-whole"}],
    ),
    Case(
        "VGPUQuotaExhausted",
        [
            (_portal("gpuportal_quota_used_units", department="nlp", flavor="h100-vgpu", sharing_mode="vgpu"), "4x10"),
            (_portal("gpuportal_quota_effective_limit_units", department="nlp", flavor="h100-vgpu", sharing_mode="vgpu"),
             "4x10"),
            # A quota of nothing, holding nothing, is not "used up".
            (_portal("gpuportal_quota_used_units", department="vision", flavor="h100-vgpu", sharing_mode="vgpu"), "0x10"),
            (_portal("gpuportal_quota_effective_limit_units", department="vision", flavor="h100-vgpu",
                     sharing_mode="vgpu"), "0x10"),
            (_portal("gpuportal_quota_used_gpu_equivalents", department="acme"), "16x10"),
            (_portal("gpuportal_quota_effective_limit_gpu_equivalents", department="acme"), "16x10"),
        ],
        quiet_at="4m", fires_at="5m",
        fired=[
            {**PORTAL, "department": "acme", "flavor": "gpu-equivalents", "sharing_mode": "all flavors"},
            {**PORTAL, "department": "nlp", "flavor": "h100-vgpu", "sharing_mode": "vgpu"},
        ],
    ),
    Case(
        "GPUGrantedButIdle",
        [
            (_portal("gpuportal_allocation_gpu_activity_ratio", allocation="7", cluster="gpu-a", department="nlp",
                     project="nlp-llm"), "0.01x130"),
            (_portal("gpuportal_allocation_gpu_activity_ratio", allocation="8", cluster="gpu-a", department="nlp",
                     project="nlp-llm"), "0.6x130"),
        ],
        quiet_at="119m", fires_at="120m",
        fired=[{**PORTAL, "allocation": "7", "cluster": "gpu-a", "department": "nlp", "project": "nlp-llm"}],
    ),
    Case(
        "AllocationPendingTooLong",
        [
            (_portal("gpuportal_allocation_oldest_pending_age_seconds", department="vision"), "14460+60x10"),
            (_portal("gpuportal_allocation_oldest_pending_age_seconds", department="nlp"), "60+60x10"),
        ],
        quiet_at="4m", fires_at="5m",
        fired=[{**PORTAL, "department": "vision"}],
    ),
    Case(
        "PendingReasonGrowing",
        [
            # quota: 20 more from 11 minutes on; no-fit: steady; unread: grows, but is never a reason.
            (_portal("gpuportal_pending_requests", reason="quota"), "0x10 20x30"),
            (_portal("gpuportal_pending_requests", reason="no-fit"), "5x40"),
            (_portal("gpuportal_pending_requests", reason="unread"), "0+5x40"),
        ],
        quiet_at="25m", fires_at="26m",
        fired=[{**PORTAL, "reason": "quota"}],
    ),
    Case(
        "ClusterSyncFailing",
        [
            # gpu-a: pushes start failing at 2 minutes.
            (_portal("gpuportal_cluster_push_failures_total", cluster="gpu-a"), "0 0 5 10 15 20 25 30 35 40 45"),
            (_portal("gpuportal_cluster_push_queue_depth", cluster="gpu-a"), "0x10"),
            (_portal("gpuportal_cluster_last_successful_sync_timestamp_seconds", cluster="gpu-a"), "0x10"),
            # gpu-b: pushes wait from 2 minutes on, and nothing has reached the cluster for long.
            (_portal("gpuportal_cluster_push_failures_total", cluster="gpu-b"), "0x10"),
            (_portal("gpuportal_cluster_push_queue_depth", cluster="gpu-b"), "0 0 3x8"),
            (_portal("gpuportal_cluster_last_successful_sync_timestamp_seconds", cluster="gpu-b"), "-3600x10"),
            # gpu-c: healthy (its queue drains and its last success is recent).
            (_portal("gpuportal_cluster_push_failures_total", cluster="gpu-c"), "1x10"),
            (_portal("gpuportal_cluster_push_queue_depth", cluster="gpu-c"), "1x10"),
            (_portal("gpuportal_cluster_last_successful_sync_timestamp_seconds", cluster="gpu-c"), "0+60x10"),
        ],
        quiet_at="6m", fires_at="7m",
        fired=[{**PORTAL, "cluster": "gpu-a"}, {**PORTAL, "cluster": "gpu-b"}],
    ),
    Case(
        "NodeReportStale",
        [
            (_portal("gpuportal_node_report_stale", cluster="gpu-a", node="gpu-node-1"), "0 1x10"),
            (_portal("gpuportal_node_report_stale", cluster="gpu-a", node="gpu-node-2"), "0x10"),
        ],
        quiet_at="5m", fires_at="6m",
        fired=[{**PORTAL, "cluster": "gpu-a", "node": "gpu-node-1"}],
    ),
    Case(
        "AuditCheckpointStale",
        # A checkpoint at time 0 and none after: 600 s old at 10m, older from 11m, firing 5m later.
        [(_portal("gpuportal_audit_last_checkpoint_timestamp_seconds"), "0x20")],
        quiet_at="15m", fires_at="16m",
        fired=[dict(PORTAL)],
    ),
    Case(
        "AuditCheckpointStale",
        # The portal is scraped (its chain head is there) but has never made a checkpoint: the absent()
        # guard holds from the first evaluation, firing 5m later (without job and instance: absent() has none).
        [(_portal("gpuportal_audit_chain_head_sequence"), "12x10")],
        quiet_at="4m", fires_at="5m",
        fired=[{}],
        name="AuditCheckpointStale never made",
    ),
    Case(
        "AuditCheckpointStale",
        # A checkpoint every minute (the heartbeat): never stale, never absent.
        [(_portal("gpuportal_audit_chain_head_sequence"), "12x20"),
         (_portal("gpuportal_audit_last_checkpoint_timestamp_seconds"), "0+60x20")],
        quiet_at="15m", fires_at="16m",
        name="AuditCheckpointStale fresh",
    ),
    Case(
        "AuditCheckpointStale",
        # A Prometheus that does not scrape the portal (a cluster's, say) has neither series: no alert.
        [(_selector("DCGM_FI_DEV_GPU_UTIL", {"UUID": "GPU-whole", "gpu": "0", "Hostname": "n1"}), "5x10")],
        quiet_at="4m", fires_at="5m",
        name="AuditCheckpointStale without the portal",
    ),
    *[
        Case(
            alert,
            [(_portal("gpuportal_custody_alarms", cluster="gpu-a", node="gpu-node-1", kind=kind), values),
             (_portal("gpuportal_custody_alarms", cluster="gpu-a", node="gpu-node-2", kind=kind), "0x" + values.split("x")[1])],
            quiet_at=quiet, fires_at=fires,
            fired=[{**PORTAL, "cluster": "gpu-a", "node": "gpu-node-1", "kind": kind}],
        )
        for alert, kind, values, quiet, fires in (
            ("CustodyGpuWithoutGrant", "ungranted", "0 1x10", "1m", "2m"),
            ("CustodyForeignProject", "foreign_project", "0 1x10", "1m", "2m"),
            ("CustodyGrantUnused", "grant_unused", "0 1x70", "60m", "61m"),
            ("CustodyReportsStopped", "reports_stopped", "0 1x10", "1m", "2m"),
        )
    ],
]

_LABEL = re.compile(r"\{\{ \$labels\.(\w+) \}\}")


def render_annotation(template: str, labels: dict[str, str]) -> str:
    """What Prometheus makes of our annotation templates (they use only ``$labels``)."""
    return _LABEL.sub(lambda m: labels.get(m.group(1), ""), template)


def promtool_tests_document(*, rule_file: str, thresholds: AlertThresholds | None = None) -> dict[str, Any]:
    """The ``promtool test rules`` document for every case."""
    rules = {rule["alert"]: rule for group in alert_groups(thresholds or AlertThresholds()) for rule in group["rules"]
             if "alert" in rule}  # fmt: skip
    tests = []
    for case in CASES:
        rule = rules[case.alert]
        expected = [
            {
                "exp_labels": {**labels, **rule["labels"]},
                "exp_annotations": {key: render_annotation(value, labels) for key, value in rule["annotations"].items()},
            }
            for labels in case.fired
        ]
        tests.append({
            "name": case.name or case.alert,
            "interval": "1m",
            "input_series": [{"series": series, "values": values} for series, values in case.series],
            "alert_rule_test": [
                {"eval_time": case.quiet_at, "alertname": case.alert, "exp_alerts": []},
                {"eval_time": case.fires_at, "alertname": case.alert, "exp_alerts": expected},
            ],
        })  # fmt: skip
    return {"rule_files": [rule_file], "evaluation_interval": "1m", "tests": tests}

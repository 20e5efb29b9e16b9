"""The alert rules: promtool accepts them, every alert fires at the edge of its ``for:`` window and
not before, the files in deploy/ are what the settings make, and bad thresholds are refused."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from clusters.dcgm import GENERATIONS
from delivery.alert_rules import AlertThresholds, alert_groups, gpu_busy_expression, render_prometheus_rule
from delivery.alert_settings import alert_thresholds
from delivery.management.commands.alert_rules import rules_text
from tests.observability.rule_cases import CASES, promtool_tests_document

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "prometheus"
RULES = DEPLOY / "gpuportal-rules.yml"
PROMETHEUS_RULE = DEPLOY / "gpuportal-prometheusrule.yaml"
RULE_TESTS = DEPLOY / "gpuportal-rules.test.yml"
DOCS = ROOT / "docs" / "observability.md"
ALERTS = {"GPUOverload", "VGPUQuotaExhausted", "GPUGrantedButIdle", "AllocationPendingTooLong", "PendingReasonGrowing",
          "ClusterSyncFailing",
          "NodeReportStale", "AuditCheckpointStale", "CustodyGpuWithoutGrant", "CustodyForeignProject",
          "CustodyGrantUnused", "CustodyReportsStopped"}  # fmt: skip


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("GPUPORTAL_REQUIRE_PROMETHEUS") == "1":
            pytest.fail("promtool is missing (make prometheus installs Debian's prometheus package)")
        pytest.skip("promtool is not installed (make prometheus)")
    return found


def rule_tests_text() -> str:
    document = promtool_tests_document(rule_file=RULES.name)
    return "# Generated from tests/observability/rule_cases.py: promtool test rules " + RULE_TESTS.name + "\n" + \
        yaml.safe_dump(document, sort_keys=False, width=1000, allow_unicode=True)


def test_the_rules_are_the_twelve_alerts_each_with_a_case() -> None:
    names = {rule["alert"] for group in alert_groups(AlertThresholds()) for rule in group["rules"] if "alert" in rule}
    assert names == ALERTS
    assert {case.alert for case in CASES} == ALERTS
    for group in alert_groups(AlertThresholds()):
        for rule in group["rules"]:
            if "alert" in rule:
                assert rule["for"] and rule["labels"]["severity"] in {"info", "warning", "critical"}
                assert rule["annotations"]["description"].strip()


def test_the_files_in_deploy_are_what_the_default_settings_make() -> None:
    assert RULES.read_text() == rules_text(kind="rules")
    assert PROMETHEUS_RULE.read_text() == rules_text(kind="prometheusrule")
    assert RULE_TESTS.read_text() == rule_tests_text()


def test_promtool_checks_the_rule_file() -> None:
    done = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 13 rules found" in done.stdout


def test_every_alert_fires_at_the_edge_of_its_window_and_not_before() -> None:
    done = subprocess.run([promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, cwd=DEPLOY)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_would_notice_a_wrong_edge(tmp_path: Path) -> None:
    """The cases can fail: with a longer idle window the idle alert is not firing at the old edge."""
    longer = AlertThresholds(idle_for="3h")
    (tmp_path / RULES.name).write_text(yaml.safe_dump({"groups": alert_groups(longer)}))
    tests = tmp_path / "tests.yml"
    tests.write_text(yaml.safe_dump(promtool_tests_document(rule_file=RULES.name, thresholds=longer)))
    done = subprocess.run([promtool(), "test", "rules", str(tests)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode != 0
    assert "GPUGrantedButIdle" in done.stdout + done.stderr


def test_gpu_busy_takes_the_max_per_device_never_the_sum() -> None:
    expression = gpu_busy_expression()
    assert "sum" not in expression
    assert expression.startswith(f"clamp_max(max by (UUID, GPU_I_ID) ({GENERATIONS[0].sm_active}) or ")
    assert expression.index(GENERATIONS[-1].sm_active) < expression.index(GENERATIONS[0].gr_engine_active)


def test_thresholds_come_from_the_settings(settings: Any) -> None:
    settings.GPUPORTAL_ALERT_IDLE_FOR = "90m"
    settings.GPUPORTAL_ALERT_PENDING_SECONDS = 7200
    thresholds = alert_thresholds()
    rules = {rule["alert"]: rule for group in alert_groups(thresholds) for rule in group["rules"] if "alert" in rule}
    assert rules["GPUGrantedButIdle"]["for"] == "90m"
    assert rules["AllocationPendingTooLong"]["expr"].endswith("> 7200")
    assert "2 hours" in rules["AllocationPendingTooLong"]["annotations"]["summary"]


@pytest.mark.parametrize(
    ("setting", "value", "named"),
    [
        ("GPUPORTAL_ALERT_IDLE_FOR", "two hours", "GPUPORTAL_ALERT_IDLE_FOR"),
        ("GPUPORTAL_ALERT_GPU_OVERLOAD_RATIO", 1.5, "GPUPORTAL_ALERT_GPU_OVERLOAD_RATIO"),
        ("GPUPORTAL_ALERT_QUOTA_EXHAUSTED_RATIO", 0.0, "GPUPORTAL_ALERT_QUOTA_EXHAUSTED_RATIO"),
    ],
)
def test_a_bad_threshold_is_refused_naming_its_setting(settings: Any, setting: str, value: Any, named: str) -> None:
    setattr(settings, setting, value)
    with pytest.raises(ImproperlyConfigured, match=re.escape(named)):
        alert_thresholds()


def test_the_prometheus_rule_carries_the_portal_labels_over_the_clusters(tmp_path: Path) -> None:
    rule = render_prometheus_rule(AlertThresholds(), namespace="monitoring",
                                  labels={"release": "kube-prometheus-stack", "app.kubernetes.io/managed-by": "x"})  # fmt: skip
    assert rule["kind"] == "PrometheusRule" and rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "monitoring"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuportal"
    # spec.groups is a rule file body: promtool accepts it as one.
    body = tmp_path / "spec.yml"
    body.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    assert subprocess.run([promtool(), "check", "rules", str(body)], capture_output=True).returncode == 0


def test_the_command_writes_a_prometheus_rule_with_labels(tmp_path: Path) -> None:
    output = tmp_path / "rule.yaml"
    call_command("alert_rules", "--format", "prometheusrule", "--namespace", "obs", "--label", "release=prom",
                 "--output", str(output))  # fmt: skip
    document = yaml.safe_load(output.read_text())
    assert document["metadata"] == {
        "name": "gpuportal-alerts", "namespace": "obs",
        "labels": {"release": "prom", "app.kubernetes.io/managed-by": "gpuportal", "gpuportal.io/scope": "cluster"},
    }  # fmt: skip


def test_every_alert_is_documented() -> None:
    text = DOCS.read_text()
    for alert in ALERTS:
        assert f"`{alert}`" in text, alert

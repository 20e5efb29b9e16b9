"""deploy/grafana/gpuportal-dashboard.json: valid JSON Grafana imports (the data source and the
cluster and department as template variables), every query reads only metrics documented in
docs/observability.md (or the alert rules' recording rule), covers what operators watch, and
promtool accepts every query as PromQL."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "gpuportal-dashboard.json"
DOCS = ROOT / "docs" / "observability.md"
RULES = ROOT / "deploy" / "prometheus" / "gpuportal-rules.yml"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# What an operator watches: every one of these is read by some panel.
WATCHED = {
    "gpuportal_department_granted_gpu_equivalents", "gpuportal_department_used_gpu_equivalents",
    "gpuportal_allocation_gpu_activity_ratio", "gpuportal_quota_used_units", "gpuportal_quota_effective_limit_units",
    "gpuportal_quota_used_gpu_equivalents", "gpuportal_quota_effective_limit_gpu_equivalents",
    "gpuportal_allocation_oldest_pending_age_seconds", "gpuportal_cluster_push_queue_depth",
    "gpuportal_cluster_push_failures_total", "gpuportal_node_report_stale",
    "gpuportal_audit_last_checkpoint_timestamp_seconds", "gpuportal_http_request_duration_seconds",
    "gpuportal_celery_tasks_total",
}  # fmt: skip
# Grafana's variables, replaced by values Prometheus reads, for promtool.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h", "$cluster": ".*",
                     "$department": ".*"}  # fmt: skip
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def expressions() -> list[str]:
    return [target["expr"] for panel in all_panels(dashboard()["panels"]) for target in panel.get("targets", [])]


def documented_metrics() -> dict[str, str]:
    """name → type, from the metrics table of docs/observability.md."""
    rows = re.findall(r"^\| `(gpuportal_[a-z0-9_]+)` \| (\w+) \|", DOCS.read_text(), re.M)
    return dict(rows)


def test_it_is_a_grafana_dashboard_with_the_data_source_cluster_and_department_as_variables() -> None:
    board = dashboard()
    assert board["title"] and board["uid"] == "gpuportal-overview" and 36 <= board["schemaVersion"] <= 41
    variables = {variable["name"]: variable for variable in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name, metric in (("cluster", "gpuportal_cluster_push_queue_depth"), ("department", "gpuportal_allocations")):
        variable = variables[name]
        assert variable["type"] == "query" and variable["datasource"] == DATASOURCE
        assert variable["query"]["query"] == f"label_values({metric}, {name})" and variable["includeAll"]
        assert variable["allValue"] == ".*"
    panels = list(all_panels(board["panels"]))
    assert len({panel["id"] for panel in panels}) == len(panels)
    for panel in panels:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]) and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE and panel["targets"], panel["title"]
        assert all(target["datasource"] == DATASOURCE for target in panel["targets"]), panel["title"]
        assert panel.get("description"), panel["title"]


def allowed_names() -> set[str]:
    """The documented metrics, with the _bucket/_sum/_count series of the histograms among them."""
    documented = documented_metrics()
    assert len(documented) >= 20, "the metrics table of docs/observability.md was not found"
    return set(documented) | {
        f"{name}{suffix}" for name, kind in documented.items() if kind == "histogram" for suffix in HISTOGRAM_SUFFIXES
    }


def unknown_names(expr: str, allowed: set[str], records: set[str]) -> set[str]:
    """The portal series and recording rules ``expr`` reads that are neither documented nor recorded."""
    names = set(re.findall(r"\bgpuportal_[a-z0-9_]+", expr)) - allowed
    return names | (set(re.findall(r"\bgpuportal:[a-z0-9_:]+", expr)) - records)


def recording_rules() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}


def test_every_query_reads_only_documented_metrics_and_covers_what_operators_watch() -> None:
    allowed, records, documented = allowed_names(), recording_rules(), documented_metrics()
    used: set[str] = set()
    for expr in expressions():
        assert not unknown_names(expr, allowed, records), expr
        for name in re.findall(r"\bgpuportal_[a-z0-9_]+", expr):
            used.add(name if name in documented else re.sub(r"_(bucket|sum|count)$", "", name))
    assert WATCHED <= used, WATCHED - used


def test_an_undocumented_name_would_be_caught() -> None:
    allowed, records = allowed_names(), recording_rules()
    assert unknown_names("avg(gpuportal_allocation_gpu_busy_ratio)", allowed, records) == {
        "gpuportal_allocation_gpu_busy_ratio"
    }
    assert unknown_names("rate(gpuportal_allocations_bucket[5m])", allowed, records) == {"gpuportal_allocations_bucket"}
    assert unknown_names("topk(3, gpuportal:gpu_idle:ratio)", allowed, records) == {"gpuportal:gpu_idle:ratio"}
    assert not unknown_names("rate(gpuportal_http_request_duration_seconds_bucket[5m])", allowed, records)


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("GPUPORTAL_REQUIRE_PROMETHEUS") == "1":
            pytest.fail("promtool is missing (make prometheus installs Debian's prometheus package)")
        pytest.skip("promtool is not installed (make prometheus)")
    return found


def test_promtool_accepts_every_query(tmp_path: Path) -> None:
    def prometheus_text(expr: str) -> str:
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, expr
        return expr

    rules = [{"record": f"dashboard:query_{index}", "expr": prometheus_text(expr)} for index, expr in enumerate(expressions())]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text(yaml.safe_dump({"groups": [{"name": "b", "rules": [{"record": "b:q", "expr": "sum(by (x) y"}]}]}))
    assert subprocess.run([promtool(), "check", "rules", str(broken)], capture_output=True).returncode != 0

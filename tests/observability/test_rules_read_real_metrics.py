"""The alert rules read only series the portal exposes (or dcgm-exporter's, by clusters/dcgm.py's names)."""

from __future__ import annotations

import re
from pathlib import Path

from clusters.dcgm import GENERATIONS
from delivery.alert_rules import AlertThresholds, alert_groups

DOCS = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def test_every_series_an_alert_reads_is_a_documented_portal_metric_or_a_dcgm_name() -> None:
    documented = set(re.findall(r"^\| `(gpuportal_[a-z_]+)` \|", DOCS.read_text(), flags=re.MULTILINE))
    dcgm = {getattr(names, field) for names in GENERATIONS for field in ("sm_active", "gr_engine_active", "gpu_util")}
    read: set[str] = set()
    for group in alert_groups(AlertThresholds()):
        for rule in group["rules"]:
            read |= set(re.findall(r"\b(gpuportal_[a-z_]+|DCGM_FI_[A-Z_]+)\b", rule["expr"]))
    assert read - documented - dcgm == set()
    assert {"gpuportal_cluster_push_failures_total", "gpuportal_quota_effective_limit_units"} <= read

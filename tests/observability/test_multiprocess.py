"""Under gunicorn's several workers the request counters of every process are added up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]

WORKER = """
from observability.process import HTTP_REQUESTS, HTTP_DURATION
for _ in range({count}):
    HTTP_REQUESTS.labels("GET", "api/v1/allocations/", "200").inc()
    HTTP_DURATION.labels("GET", "api/v1/allocations/").observe(0.02)
"""

READER = """
from prometheus_client import CollectorRegistry, generate_latest
from observability.process import process_collectors_register
registry = CollectorRegistry()
process_collectors_register(registry)
print(generate_latest(registry).decode())
"""


def run(code: str, folder: Path) -> str:
    environment = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(folder), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True)
    return done.stdout


def test_counters_of_separate_worker_processes_are_added_up(tmp_path: Path) -> None:
    run(WORKER.format(count=3), tmp_path)
    run(WORKER.format(count=4), tmp_path)
    text = run(READER, tmp_path)
    families = {family.name: family for family in text_string_to_metric_families(text)}
    requests = [s for s in families["gpuportal_http_requests"].samples if s.name == "gpuportal_http_requests_total"]
    assert [(s.labels["route"], s.value) for s in requests] == [("api/v1/allocations/", 7.0)]
    counts = [s for s in families["gpuportal_http_request_duration_seconds"].samples if s.name.endswith("_count")]
    assert [s.value for s in counts] == [7.0]

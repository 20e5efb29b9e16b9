"""report_schema.json: well-formed, in step with the typed model, and strict where it matters."""

from __future__ import annotations

import copy
import re
from typing import Any, get_type_hints

import pytest

from agent import report as model
from agent.report import load_schema
from tests.agent.schema_subset import SUPPORTED_KEYWORDS, ecma_pattern, validate
from tests.agent.test_portal_delivery import a_report

SCHEMA = load_schema()


def _schemas(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema object inside the schema, with where it is."""
    if not isinstance(node, dict):
        return []
    found = [(path or "/", node)]
    for keyword, value in node.items():
        if keyword in ("properties", "$defs"):
            for name, sub in value.items():
                found += _schemas(sub, f"{path}/{keyword}/{name}")
        elif keyword == "items":
            found += _schemas(value, f"{path}/items")
        elif keyword == "anyOf":
            for index, sub in enumerate(value):
                found += _schemas(sub, f"{path}/anyOf/{index}")
    return found


def test_it_is_draft_2020_12_and_versioned() -> None:
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA["properties"]["schema_version"] == {"const": model.SCHEMA_VERSION}


def test_it_uses_only_keywords_the_test_validator_implements() -> None:
    for where, schema in _schemas(SCHEMA):
        unknown = set(schema) - SUPPORTED_KEYWORDS
        assert not unknown, f"{where}: {unknown}"


def test_its_patterns_compile_and_every_object_is_closed() -> None:
    for where, schema in _schemas(SCHEMA):
        if "pattern" in schema:
            assert r"\$" not in schema["pattern"], where
            re.compile(ecma_pattern(schema["pattern"]))
        if schema.get("type") == "object" or "properties" in schema:
            assert schema.get("additionalProperties") is False, where
            assert set(schema["required"]) <= set(schema["properties"]), where


@pytest.mark.parametrize(
    ("typed", "definition"),
    [
        (model.AgentReport, None),
        (model.GpuReport, "Gpu"),
        (model.MigInstanceReport, "MigInstance"),
        (model.ProcessReport, "Process"),
        (model.CallError, "CallError"),
        (model.MigMode, "MigMode"),
        (model.Utilization, "Utilization"),
        (model.EccErrors, "EccErrors"),
    ],
)
def test_the_typed_model_has_the_schema_fields(typed: Any, definition: str | None) -> None:
    schema = SCHEMA if definition is None else SCHEMA["$defs"][definition]
    assert set(get_type_hints(typed)) == set(schema["properties"])
    assert set(typed.__required_keys__) == set(schema["required"])


def valid() -> dict[str, Any]:
    report: dict[str, Any] = copy.deepcopy(dict(a_report(3)))
    report["gpus"] = [
        {
            "index": 0,
            "uuid": "GPU-266c2110-e954-56e9-a655-44ca965813bc",
            "name": "NVIDIA A100-SXM4-80GB",
            "memory_total_bytes": 85899345920,
            "memory_used_bytes": 0,
            "mig_mode": {"current": "enabled", "pending": "enabled"},
            "mig_instances": [
                {
                    "index": 0,
                    "uuid": "MIG-GPU-266c2110-e954-56e9-a655-44ca965813bc/2/0",
                    "profile": "3g.40gb",
                    "gpu_instance_id": 2,
                    "compute_instance_id": 0,
                    "gpu_instance_slices": 3,
                    "compute_instance_slices": 3,
                    "multiprocessor_count": 42,
                    "memory_total_bytes": 42144366592,
                    "memory_used_bytes": None,
                }
            ],
            "utilization": None,
            "processes": [],
            "temperature_celsius": 40,
            "power_usage_milliwatts": 80000,
            "power_limit_milliwatts": 400000,
            "ecc_errors": None,
            "unsupported": ["utilization"],
            "errors": [
                {
                    "call": "nvmlDeviceGetUUID",
                    "field": "mig_instances.uuid",
                    "error": "NVMLError_Unknown",
                    "code": 999,
                    "message": "Unknown Error",
                    "mig_index": 1,
                }
            ],
        }
    ]
    return report


def test_a_complete_report_is_valid() -> None:
    assert validate(valid(), SCHEMA) == []


def _set(report: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split("/")
    node: Any = report
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is _DELETE:
        del node[last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("schema_version", 2),
        ("schema_version", True),
        ("node_name", "GPU_Node"),
        ("node_name", "gpu-node-1\n"),
        ("sequence", -1),
        ("sequence", 1.5),
        ("collected_at", "2026-11-29T08:00:00+01:00"),
        ("collected_at", "yesterday"),
        ("interval_seconds", 0),
        ("cuda_driver_version", "12"),
        ("gpus", _DELETE),
        ("surprise", 1),
        ("gpus/0/index", 64),
        ("gpus/0/uuid", "GPU-266C2110-E954-56E9-A655-44CA965813BC"),
        ("gpus/0/memory_total_bytes", -1),
        ("gpus/0/memory_used_bytes", "0"),
        ("gpus/0/mig_mode/current", "on"),
        ("gpus/0/mig_instances/0/profile", "3g.40GB"),
        ("gpus/0/mig_instances/0/gpu_instance_slices", 9),
        ("gpus/0/mig_instances/0/uuid", "GPU-266c2110-e954-56e9-a655-44ca965813bc"),
        ("gpus/0/utilization", {"gpu_percent": 101, "memory_percent": 0}),
        ("gpus/0/processes", [{"pid": 0}]),
        ("gpus/0/temperature_celsius", 201),
        ("gpus/0/unsupported", ["utilization", "utilization"]),
        ("gpus/0/errors/0/mig_index", 16),
        ("gpus/0/errors/0/error", "not an identifier"),
        ("gpus/0/errors/0/code", _DELETE),
        ("gpus/0/ecc_errors", {"volatile_corrected": 0}),
    ],
)
def test_an_invalid_report_is_rejected(path: str, value: Any) -> None:
    report = valid()
    _set(report, path, value)
    assert validate(report, SCHEMA) != []


def test_processes_with_pods_and_without_are_valid() -> None:
    report = valid()
    report["gpus"][0]["processes"] = [
        {
            "pid": 4242,
            "used_memory_bytes": None,
            "gpu_instance_id": 2,
            "compute_instance_id": 0,
            "mig_uuid": "MIG-5f3c1a2b-8d4e-4f60-9a1b-2c3d4e5f6a7b",
            "pod_uid": "0f4b5c5e-1234-4abc-9def-0123456789ab",
            "container_id": "ab" * 32,
        },
        {
            "pid": 1,
            "used_memory_bytes": 1,
            "gpu_instance_id": None,
            "compute_instance_id": None,
            "mig_uuid": None,
            "pod_uid": "6a1f0e9c2b7d4e8fa3c5b1d0e2f4a6c8",
            "container_id": None,
        },
    ]
    assert validate(report, SCHEMA) == []

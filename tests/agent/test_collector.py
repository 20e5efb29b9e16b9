"""The collector against recorded inventories served through pynvml's own functions."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pynvml
import pytest

from agent.collector import ReportContext, collect_report
from agent.nvml_calls import NvmlUnavailable, nvml_session
from agent.report import AgentReport, load_schema
from tests.agent.conftest import NODE_NAME
from tests.agent.nvml_replay import NvmlReplay, load_recording
from tests.agent.schema_subset import validate

ReplayNode = Callable[[str], tuple[NvmlReplay, Path]]
STARTED = datetime(2026, 11, 29, 8, 0, 0, tzinfo=UTC)
NOW = datetime(2026, 11, 29, 8, 0, 30, 250000, tzinfo=UTC)
GiB = 1024**3
MiB = 1024**2


def collect(replay_node: ReplayNode, recording: str) -> tuple[AgentReport, NvmlReplay]:
    replay, proc_root = replay_node(recording)
    context = ReportContext(
        node_name=NODE_NAME, sequence=7, agent_started_at=STARTED, interval_seconds=30, proc_root=proc_root
    )
    with nvml_session():
        report = collect_report(context, now=NOW)
    assert replay.initialised == 0, "nvmlShutdown must follow nvmlInit"
    assert validate(report, load_schema()) == []
    return report, replay


def recorded_uuid(recording: str, device: int, mig_slot: int | None = None) -> Any:
    recorded = load_recording(recording)["devices"][device]
    if mig_slot is not None:
        recorded = recorded["mig_devices"][mig_slot]
    return recorded["nvmlDeviceGetUUID"]


def test_it_reports_the_node_header(replay_node: ReplayNode) -> None:
    report, _ = collect(replay_node, "h100-80gb-no-mig")
    assert report["schema_version"] == 1
    assert report["node_name"] == NODE_NAME
    assert report["sequence"] == 7
    assert report["agent_started_at"] == "2026-11-29T08:00:00.000Z"
    assert report["collected_at"] == "2026-11-29T08:00:30.250Z"
    assert report["interval_seconds"] == 30
    assert report["undelivered_reports"] == 0
    assert report["driver_version"] == "550.90.07"
    assert report["cuda_driver_version"] == "12.4"
    assert report["errors"] == []


def test_it_reads_an_a100_with_mig_instances(replay_node: ReplayNode) -> None:
    report, _ = collect(replay_node, "a100-80gb-mig")
    [gpu] = report["gpus"]
    assert gpu["name"] == "NVIDIA A100-SXM4-80GB"
    assert gpu["uuid"] == recorded_uuid("a100-80gb-mig", 0)
    assert gpu["memory_total_bytes"] == 80 * GiB
    assert gpu["mig_mode"] == {"current": "enabled", "pending": "enabled"}
    assert [
        (m["index"], m["profile"], m["gpu_instance_id"], m["compute_instance_id"]) for m in gpu["mig_instances"]
    ] == [
        (0, "3g.40gb", 2, 0),
        (1, "2g.20gb", 3, 0),
        (2, "2g.20gb", 4, 0),
    ]
    big = gpu["mig_instances"][0]
    assert big["uuid"] == recorded_uuid("a100-80gb-mig", 0, 0)
    assert (big["gpu_instance_slices"], big["compute_instance_slices"], big["multiprocessor_count"]) == (3, 3, 42)
    assert big["memory_total_bytes"] == 40192 * MiB
    assert big["memory_used_bytes"] == 8 * GiB + 13 * MiB
    # NVML does not report utilisation in MIG mode: not an error, just unsupported
    assert gpu["utilization"] is None
    assert gpu["unsupported"] == ["utilization"]
    assert gpu["errors"] == []
    assert (gpu["temperature_celsius"], gpu["power_usage_milliwatts"], gpu["power_limit_milliwatts"]) == (
        41,
        87345,
        400000,
    )
    assert gpu["ecc_errors"] == {
        "volatile_corrected": 0,
        "volatile_uncorrected": 0,
        "aggregate_corrected": 2,
        "aggregate_uncorrected": 0,
    }


def test_it_attributes_mig_processes_to_their_instance_and_pod(replay_node: ReplayNode) -> None:
    report, _ = collect(replay_node, "a100-80gb-mig")
    [gpu] = report["gpus"]
    assert gpu["processes"] is not None
    by_pid = {p["pid"]: p for p in gpu["processes"]}
    assert set(by_pid) == {48213, 51007}
    train = by_pid[48213]
    assert train["mig_uuid"] == recorded_uuid("a100-80gb-mig", 0, 0)
    assert (train["gpu_instance_id"], train["compute_instance_id"]) == (2, 0)
    assert train["used_memory_bytes"] == 8 * GiB
    assert train["pod_uid"] is not None and "_" not in train["pod_uid"]  # systemd form, dashes restored
    assert train["container_id"] is not None and len(train["container_id"]) == 64
    notebook = by_pid[51007]
    # NVML gave "not available" instance ids: the MIG device it was listed on supplies them
    assert (notebook["gpu_instance_id"], notebook["compute_instance_id"]) == (4, 0)
    assert notebook["mig_uuid"] == recorded_uuid("a100-80gb-mig", 0, 2)
    assert notebook["pod_uid"] is not None and notebook["pod_uid"] != train["pod_uid"]


def test_it_skips_empty_mig_slots_without_errors(replay_node: ReplayNode) -> None:
    _, replay = collect(replay_node, "a100-80gb-mig")
    slots = [args[1] for name, args in replay.calls if name == "nvmlDeviceGetMigDeviceHandleByIndex"]
    assert slots == list(range(7))


def test_it_reads_an_h100_without_mig(replay_node: ReplayNode) -> None:
    report, replay = collect(replay_node, "h100-80gb-no-mig")
    [gpu] = report["gpus"]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["memory_total_bytes"] == 81559 * MiB
    assert gpu["memory_used_bytes"] == 24_696_061_952
    assert gpu["mig_mode"] == {"current": "disabled", "pending": "disabled"}
    assert gpu["mig_instances"] == []
    assert gpu["utilization"] == {"gpu_percent": 87, "memory_percent": 54}
    assert gpu["unsupported"] == [] and gpu["errors"] == []
    assert gpu["processes"] is not None
    serving, host_process = gpu["processes"]
    assert serving["pid"] == 7712 and serving["pod_uid"] is not None
    assert (serving["gpu_instance_id"], serving["compute_instance_id"], serving["mig_uuid"]) == (None, None, None)
    assert host_process["pid"] == 913
    assert (host_process["pod_uid"], host_process["container_id"]) == (None, None)
    assert not any(name == "nvmlDeviceGetMaxMigDeviceCount" for name, _ in replay.calls)


def test_it_reads_every_gpu_of_an_8_gpu_node(replay_node: ReplayNode) -> None:
    report, _ = collect(replay_node, "h200-8gpu-node")
    gpus = report["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert len({g["uuid"] for g in gpus}) == 8
    assert {g["name"] for g in gpus} == {"NVIDIA H200"}
    assert report["cuda_driver_version"] == "12.8"
    assert all(g["errors"] == [] and g["unsupported"] == [] for g in gpus)
    assert gpus[5]["mig_mode"] == {"current": "disabled", "pending": "enabled"}
    assert gpus[3]["ecc_errors"] is not None and gpus[3]["ecc_errors"]["volatile_corrected"] == 1
    processes = {p["pid"]: (g["index"], p) for g in gpus for p in g["processes"] or []}
    # one training pod spread over GPUs 1 and 3
    assert processes[120031][1]["pod_uid"] == processes[120032][1]["pod_uid"] is not None
    assert (processes[120031][0], processes[120032][0]) == (1, 3)
    # a static pod's UID is kubelet's 32-hex-digit hash
    static = processes[2201][1]
    assert static["pod_uid"] is not None and len(static["pod_uid"]) == 32
    assert static["used_memory_bytes"] is None  # NVML: not available
    assert processes[99120][1]["container_id"] is not None  # crio-<id>.scope
    # exited before its cgroup was read: still reported, without a pod
    assert processes[99777][1]["pod_uid"] is None


def test_it_reports_failing_gpus_and_keeps_the_healthy_one(replay_node: ReplayNode) -> None:
    report, _ = collect(replay_node, "faulty-gpus-node")
    healthy, lost, unopenable = report["gpus"]

    assert healthy["errors"] == []
    assert healthy["unsupported"] == ["mig_mode"]  # an L4 is not MIG-capable
    assert healthy["utilization"] == {"gpu_percent": 35, "memory_percent": 12}
    assert healthy["processes"] is not None and healthy["processes"][0]["pod_uid"] is not None

    assert lost["uuid"] == recorded_uuid("faulty-gpus-node", 1)
    for field in ("memory_total_bytes", "mig_mode", "utilization", "processes", "temperature_celsius",
                  "power_usage_milliwatts", "power_limit_milliwatts", "ecc_errors"):  # fmt: skip
        assert dict(lost)[field] is None, field
    assert {e["error"] for e in lost["errors"]} == {"NVMLError_GpuIsLost"}
    assert {e["code"] for e in lost["errors"]} == {pynvml.NVML_ERROR_GPU_IS_LOST}
    assert {e["field"] for e in lost["errors"]} == {
        "memory", "mig_mode", "utilization", "processes", "temperature_celsius", "power_usage_milliwatts",
        "power_limit_milliwatts", "ecc_errors.volatile_corrected", "ecc_errors.volatile_uncorrected",
        "ecc_errors.aggregate_corrected", "ecc_errors.aggregate_uncorrected",
    }  # fmt: skip
    memory_error = next(e for e in lost["errors"] if e["field"] == "memory")
    assert memory_error == {
        "call": "nvmlDeviceGetMemoryInfo",
        "field": "memory",
        "error": "NVMLError_GpuIsLost",
        "code": 15,
        "message": "GPU is lost",
    }

    assert unopenable["index"] == 2 and unopenable["uuid"] is None and unopenable["name"] is None
    assert [(e["call"], e["error"]) for e in unopenable["errors"]] == [
        ("nvmlDeviceGetHandleByIndex", "NVMLError_NoPermission")
    ]


def test_an_unexpected_failure_costs_only_that_gpu(replay_node: ReplayNode, monkeypatch: pytest.MonkeyPatch) -> None:
    replay, proc_root = replay_node("h200-8gpu-node")
    recorded_memory_info = pynvml.nvmlDeviceGetMemoryInfo

    def memory_info(handle: Any) -> Any:
        if replay.same_device(handle, replay.handle(4)):
            return object()  # a shape the collector does not expect
        return recorded_memory_info(handle)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", memory_info)
    with nvml_session():
        report = collect_report(ReportContext(NODE_NAME, 0, STARTED, 30, proc_root), now=NOW)
    assert [e["error"] for e in report["gpus"][4]["errors"]] == ["AttributeError"]
    assert report["gpus"][4]["errors"][0]["code"] is None
    assert all(g["errors"] == [] for i, g in enumerate(report["gpus"]) if i != 4)
    assert validate(report, load_schema()) == []


def test_a_failing_gpu_count_is_a_node_error(replay_node: ReplayNode) -> None:
    replay, proc_root = replay_node("h100-80gb-no-mig")
    replay.recording["system"]["nvmlDeviceGetCount"] = {"nvml_error": "NVMLError_Unknown"}
    with nvml_session():
        report = collect_report(ReportContext(NODE_NAME, 0, STARTED, 30, proc_root), now=NOW)
    assert report["gpus"] == []
    assert [(e["call"], e["field"], e["error"]) for e in report["errors"]] == [
        ("nvmlDeviceGetCount", "gpus", "NVMLError_Unknown")
    ]
    assert validate(report, load_schema()) == []


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        ("NVMLError_LibraryNotFound", "NVML library not found"),
        ("NVMLError_DriverNotLoaded", "kernel driver not loaded"),
        ("NVMLError_NoPermission", "NVMLError_NoPermission"),
    ],
)
def test_nvml_session_explains_why_nvml_is_unavailable(replay_node: ReplayNode, error: str, expected: str) -> None:
    replay, _ = replay_node("h100-80gb-no-mig")
    replay.recording["nvmlInit"] = {"nvml_error": error}
    with pytest.raises(NvmlUnavailable, match=expected), nvml_session():
        pass


def test_answers_the_schema_would_refuse_become_errors_not_a_refused_report(replay_node: ReplayNode) -> None:
    replay, proc_root = replay_node("a100-80gb-mig")
    device = replay.recording["devices"][0]
    device["nvmlDeviceGetUUID"] = device["nvmlDeviceGetUUID"].upper()  # hex digits in upper case
    device["nvmlDeviceGetTemperature"] = {"NVML_TEMPERATURE_GPU": 255}
    device["nvmlDeviceGetPowerUsage"] = 4294967295
    device["mig_devices"][1]["nvmlDeviceGetAttributes"]["gpuInstanceSliceCount"] = 9
    device["mig_devices"][2]["nvmlDeviceGetGpuInstanceId"] = 4294967295
    with nvml_session():
        report = collect_report(ReportContext(NODE_NAME, 0, STARTED, 30, proc_root), now=NOW)
    assert validate(report, load_schema()) == []
    [gpu] = report["gpus"]
    assert (gpu["uuid"], gpu["temperature_celsius"], gpu["power_usage_milliwatts"]) == (None, None, None)
    assert gpu["power_limit_milliwatts"] == 400000
    rejected = {(e["field"], e.get("mig_index")): e for e in gpu["errors"]}
    assert set(rejected) == {
        ("uuid", None),
        ("temperature_celsius", None),
        ("power_usage_milliwatts", None),
        ("mig_instances.gpu_instance_slices", 1),
        ("mig_instances.gpu_instance_id", 2),
    }
    assert {e["error"] for e in gpu["errors"]} == {"UnexpectedValue"}
    assert rejected[("temperature_celsius", None)]["message"] == "NVML returned 255, expected 0..200"
    assert rejected[("temperature_celsius", None)]["call"] == "nvmlDeviceGetTemperature"
    assert gpu["mig_instances"][1]["gpu_instance_slices"] is None
    assert gpu["mig_instances"][1]["profile"] == "2g.20gb"  # from the device name all the same


def test_the_collectors_ranges_are_the_schemas() -> None:
    from agent.collector import GPU_UUID, MIG_UUID, RANGES

    schema = load_schema()
    definitions = schema["$defs"]

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            node = definitions[node["$ref"].rsplit("/", 1)[-1]]
        return node

    owners = {"utilization": "Utilization", "mig_instances": "MigInstance"}
    for field, (low, high) in RANGES.items():
        owner, _, name = field.rpartition(".")
        prop = resolve(definitions[owners.get(owner, "Gpu")]["properties"][name])
        assert (prop["minimum"], prop["maximum"]) == (low, high), field
    assert "^" + GPU_UUID.pattern + "$" == definitions["GpuUuid"]["pattern"]
    assert "^" + MIG_UUID.pattern.replace("(?:", "(") + "$" == definitions["MigUuid"]["pattern"]


def test_unknown_mig_devices_mean_unknown_processes_not_none(replay_node: ReplayNode) -> None:
    replay, proc_root = replay_node("a100-80gb-mig")
    device = replay.recording["devices"][0]
    device["mig_devices"] = [{"nvml_error": "NVMLError_NoPermission"}] + [{"nvml_error": "NVMLError_NotFound"}] * 6
    with nvml_session():
        report = collect_report(ReportContext(NODE_NAME, 0, STARTED, 30, proc_root), now=NOW)
    [gpu] = report["gpus"]
    assert gpu["mig_instances"] == [] and gpu["processes"] is None
    assert [(e["call"], e["error"], e.get("mig_index")) for e in gpu["errors"]] == [
        ("nvmlDeviceGetMigDeviceHandleByIndex", "NVMLError_NoPermission", 0)
    ]


def test_a_mig_gpu_without_mig_devices_runs_nothing(replay_node: ReplayNode) -> None:
    replay, proc_root = replay_node("a100-80gb-mig")
    device = replay.recording["devices"][0]
    device["mig_devices"] = [{"nvml_error": "NVMLError_NotFound"}] * 7
    with nvml_session():
        report = collect_report(ReportContext(NODE_NAME, 0, STARTED, 30, proc_root), now=NOW)
    assert report["gpus"][0]["processes"] == [] and report["gpus"][0]["errors"] == []

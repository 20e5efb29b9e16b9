"""The agent reads custody from the kubelet's PodResources API (a fake kubelet serving the real proto).

What the report's ``pod_devices`` must say is exactly what the kubelet listed (GPU resources only),
each device named with how it is shared, ``pod_uid`` joined from the NVML processes' cgroups only where
unambiguous; any failure to read gives ``pod_resources_error`` and no ``pod_devices``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from agent import pod_resources
from agent.__main__ import EXIT_OK, run
from agent.report import load_schema
from tests.agent.conftest import NODE_NAME
from tests.agent.fake_kubelet import FakeKubelet
from tests.agent.nvml_replay import NvmlReplay
from tests.agent.schema_subset import validate

ReplayNode = Callable[[str], tuple[NvmlReplay, Path]]

# The h200-8gpu-node recording: which GPU runs which pod's processes (from their cgroups).
H200 = {index: uuid for index, uuid in enumerate([
    "GPU-5179c863-0fce-5603-ba26-1e9e12d3625d",  # no process
    "GPU-42644e70-48b8-5023-ad9c-f41f66aeda66",  # pod 31709b0e-...
    "GPU-6bd91b66-350e-55ce-a21f-bd41f6da8a58",  # processes of two pods
    "GPU-64eebcdd-fd87-56da-a16e-b600fd40ed74",  # pod 31709b0e-... again
    "GPU-230a640a-e2af-5b84-8848-9d83def907ca",
    "GPU-4241e5a6-dd59-597b-9961-1c00b70169cb",
    "GPU-379a2fea-5312-5106-bb5a-e2b1741028c5",  # pod 002162b8-...
])}  # fmt: skip
TRAIN_UID = "31709b0e-1dda-5fe8-ac35-fa6e5e436854"
INFER_UID = "002162b8-ab85-55f8-b6be-7cfca5b68287"


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    # A short directory: a unix socket's path is limited to 107 bytes, and pytest's tmp_path can be longer.
    directory = Path(tempfile.mkdtemp(prefix="kubelet-"))
    with FakeKubelet(directory / "kubelet.sock") as fake:
        yield fake
    shutil.rmtree(directory, ignore_errors=True)


def _dry_run(proc_root: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    argv = ["--once", "--dry-run", "--node-name", NODE_NAME, "--proc-root", str(proc_root), *flags]
    assert run(argv, {}) == EXIT_OK
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert validate(report, load_schema()) == []
    return report


def _device(namespace: str, pod: str, resource: str, device_id: str, sharing: str, uid: str | None) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "pod": pod,
        "pod_uid": uid,
        "container": "main",
        "resource": resource,
        "device_id": device_id,
        "sharing": sharing,
    }


def test_the_report_lists_exactly_what_the_kubelet_holds_with_uids_from_the_processes(
    replay_node: ReplayNode, kubelet: FakeKubelet, capsys: pytest.CaptureFixture[str]
) -> None:
    _, proc_root = replay_node("h200-8gpu-node")
    kubelet.hold("nlp", "train", "main", "nvidia.com/gpu", H200[1], H200[3])
    kubelet.hold("nlp", "train", "main", "example.com/nic", "nic-0")  # not a GPU: not custody
    kubelet.hold("vision", "infer", "main", "nvidia.com/gpu", H200[6])
    kubelet.hold("nlp", "idle", "main", "nvidia.com/gpu", H200[0])  # nothing runs: no UID to join
    kubelet.hold("vision", "share-a", "main", "nvidia.com/gpu", f"{H200[2]}::0")
    kubelet.hold("vision", "share-b", "main", "nvidia.com/gpu", f"{H200[2]}::1")  # two pods, one GPU

    report = _dry_run(proc_root, capsys, "--pod-resources-socket", str(kubelet.socket))

    assert report["pod_resources_error"] is None
    assert report["pod_devices"] == [
        _device("nlp", "train", "nvidia.com/gpu", H200[1], "exclusive", TRAIN_UID),
        _device("nlp", "train", "nvidia.com/gpu", H200[3], "exclusive", TRAIN_UID),
        _device("vision", "infer", "nvidia.com/gpu", H200[6], "exclusive", INFER_UID),
        _device("nlp", "idle", "nvidia.com/gpu", H200[0], "exclusive", None),
        # The GPU's processes belong to two pods and two pods hold its replicas: no UID is guessed.
        _device("vision", "share-a", "nvidia.com/gpu", f"{H200[2]}::0", "time-sliced", None),
        _device("vision", "share-b", "nvidia.com/gpu", f"{H200[2]}::1", "time-sliced", None),
    ]
    assert kubelet.state.list_calls == 1


def test_mig_devices_mps_replicas_and_hami_shares_are_named_as_such(
    replay_node: ReplayNode, kubelet: FakeKubelet, capsys: pytest.CaptureFixture[str]
) -> None:
    _, proc_root = replay_node("a100-80gb-mig")
    mig_a, mig_b = "MIG-5d3fcda1-6ae7-5a3d-8265-c3f939c539fc", "MIG-bc54da3e-2d1c-5999-a776-b37fbc43b7e8"
    kubelet.hold("nlp", "small", "main", "nvidia.com/mig-1g.10gb", mig_a)
    kubelet.hold("vision", "single", "main", "nvidia.com/gpu", mig_b)  # MIG "single" strategy
    kubelet.hold("nlp", "mps", "main", "nvidia.com/gpu.shared", "GPU-266c2110-e954-56e9-a655-44ca965813bc::3")
    kubelet.hold("nlp", "vgpu", "main", "hami.io/vgpu", "GPU-266c2110-e954-56e9-a655-44ca965813bc")

    flags = ["--replica-sharing", "mps", "--hami-resources", "hami.io/vgpu"]
    report = _dry_run(proc_root, capsys, "--pod-resources-socket", str(kubelet.socket), *flags)

    gpu = "GPU-266c2110-e954-56e9-a655-44ca965813bc"
    assert report["pod_devices"] == [
        _device("nlp", "small", "nvidia.com/mig-1g.10gb", mig_a, "mig", "c36450bd-61a0-586b-b474-e29d7f04b87b"),
        _device("vision", "single", "nvidia.com/gpu", mig_b, "mig", "d00ffabd-9042-5d79-9c36-5b2c2ce16763"),
        # Two pods hold the parent GPU (a replica and a HAMi share): neither gets a UID from it.
        _device("nlp", "mps", "nvidia.com/gpu.shared", f"{gpu}::3", "mps", None),
        _device("nlp", "vgpu", "hami.io/vgpu", gpu, "hami", None),
    ]


def test_a_missing_socket_is_reported_and_no_devices_are_claimed(
    replay_node: ReplayNode, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _, proc_root = replay_node("h100-80gb-no-mig")
    missing = tmp_path / "pod-resources" / "kubelet.sock"

    report = _dry_run(proc_root, capsys, "--pod-resources-socket", str(missing))

    assert "pod_devices" not in report
    assert report["pod_resources_error"] == f"PodResources socket {missing} does not exist"
    assert len(report["gpus"]) == 1  # the NVML part is unaffected


@pytest.mark.parametrize(
    ("code", "details", "expected"),
    [
        (grpc.StatusCode.UNAVAILABLE, "kubelet restarting", "PodResources List failed: UNAVAILABLE: kubelet restarting"),
        (grpc.StatusCode.PERMISSION_DENIED, "no", "PodResources List failed: PERMISSION_DENIED: no"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "rate limited", "PodResources List failed: RESOURCE_EXHAUSTED: rate limited"),
    ],
)
def test_a_grpc_error_is_reported_and_no_devices_are_claimed(
    replay_node: ReplayNode,
    kubelet: FakeKubelet,
    capsys: pytest.CaptureFixture[str],
    code: grpc.StatusCode,
    details: str,
    expected: str,
) -> None:
    _, proc_root = replay_node("h100-80gb-no-mig")
    kubelet.hold("nlp", "train", "main", "nvidia.com/gpu", "GPU-x")
    kubelet.fail_with(code, details)

    report = _dry_run(proc_root, capsys, "--pod-resources-socket", str(kubelet.socket))

    assert "pod_devices" not in report
    assert report["pod_resources_error"] == expected


def test_a_kubelet_that_does_not_answer_in_time_is_reported_as_a_timeout(
    replay_node: ReplayNode, kubelet: FakeKubelet, capsys: pytest.CaptureFixture[str]
) -> None:
    _, proc_root = replay_node("h100-80gb-no-mig")
    kubelet.hold("nlp", "train", "main", "nvidia.com/gpu", "GPU-x")
    kubelet.stall(2.0)

    flags = ["--pod-resources-socket", str(kubelet.socket), "--pod-resources-timeout", "0.2"]
    report = _dry_run(proc_root, capsys, *flags)

    assert "pod_devices" not in report
    assert report["pod_resources_error"] == "PodResources List timed out after 0.2s"


def test_a_restarted_agent_reads_the_current_state_fresh(
    replay_node: ReplayNode, kubelet: FakeKubelet, capsys: pytest.CaptureFixture[str]
) -> None:
    _, proc_root = replay_node("h200-8gpu-node")
    flags = ["--pod-resources-socket", str(kubelet.socket)]
    kubelet.hold("nlp", "train", "main", "nvidia.com/gpu", H200[1])
    first = _dry_run(proc_root, capsys, *flags)

    kubelet.release_all()  # pod A ended, pod B started elsewhere, and the kubelet restarted meanwhile
    kubelet.hold("vision", "infer", "main", "nvidia.com/gpu", H200[6])
    kubelet.restart()
    second = _dry_run(proc_root, capsys, *flags)

    assert first["pod_devices"] == [_device("nlp", "train", "nvidia.com/gpu", H200[1], "exclusive", TRAIN_UID)]
    assert second["pod_devices"] == [_device("vision", "infer", "nvidia.com/gpu", H200[6], "exclusive", INFER_UID)]
    assert kubelet.state.list_calls == 2  # one List per collection, nothing remembered in between


def test_without_a_setting_the_default_socket_is_read_only_when_it_exists(
    replay_node: ReplayNode, kubelet: FakeKubelet, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, proc_root = replay_node("h100-80gb-no-mig")
    monkeypatch.setattr(pod_resources, "DEFAULT_SOCKET", kubelet.socket.with_name("absent.sock"))
    absent = _dry_run(proc_root, capsys)
    assert "pod_devices" not in absent and "pod_resources_error" not in absent

    monkeypatch.setattr(pod_resources, "DEFAULT_SOCKET", kubelet.socket)
    present = _dry_run(proc_root, capsys)
    assert present["pod_devices"] == [] and present["pod_resources_error"] is None


def test_the_environment_sets_the_pod_resources_settings() -> None:
    from agent.config import parse_config

    config = parse_config(
        ["--dry-run"],
        {
            "GPUPORTAL_AGENT_POD_RESOURCES_SOCKET": "/run/pr/kubelet.sock",
            "GPUPORTAL_AGENT_POD_RESOURCES_TIMEOUT": "2.5",
            "GPUPORTAL_AGENT_REPLICA_SHARING": "mps",
            "GPUPORTAL_AGENT_HAMI_RESOURCES": "nvidia.com/gpu, hami.io/vgpu",
        },
    )
    settings = config.pod_resources
    assert settings.socket == Path("/run/pr/kubelet.sock") and settings.timeout_seconds == 2.5
    assert settings.replica_sharing == "mps"
    assert settings.hami_resources == frozenset({"nvidia.com/gpu", "hami.io/vgpu"})


@pytest.mark.parametrize("value", ["shared", "time-slicing"])
def test_an_unknown_replica_sharing_is_a_usage_error(value: str) -> None:
    from agent.config import parse_config

    with pytest.raises(SystemExit) as exited:
        parse_config(["--dry-run", "--replica-sharing", value], {})
    assert exited.value.code == 2


def test_the_fake_kubelet_serves_the_real_service_list_and_allocatable(kubelet: FakeKubelet) -> None:
    """Called through the generated client stub, as any PodResources client (dcgm-exporter, the agent)."""
    from agent.podresources import api_pb2, api_pb2_grpc

    kubelet.state.allocatable = {"nvidia.com/gpu": [H200[0], H200[1]]}
    kubelet.hold("nlp", "train", "main", "nvidia.com/gpu", H200[1])
    with grpc.insecure_channel(f"unix://{kubelet.socket}") as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        listed = stub.List(api_pb2.ListPodResourcesRequest(), timeout=5)
        allocatable = stub.GetAllocatableResources(api_pb2.AllocatableResourcesRequest(), timeout=5)

    [pod] = listed.pod_resources
    assert (pod.namespace, pod.name, [c.name for c in pod.containers]) == ("nlp", "train", ["main"])
    assert [(d.resource_name, list(d.device_ids)) for d in pod.containers[0].devices] == [("nvidia.com/gpu", [H200[1]])]
    assert [(d.resource_name, list(d.device_ids)) for d in allocatable.devices] == [
        ("nvidia.com/gpu", [H200[0], H200[1]])
    ]


def test_a_kubelet_that_stopped_is_reported_like_a_missing_socket(
    replay_node: ReplayNode, kubelet: FakeKubelet, capsys: pytest.CaptureFixture[str]
) -> None:
    _, proc_root = replay_node("h100-80gb-no-mig")
    kubelet.stop()

    report = _dry_run(proc_root, capsys, "--pod-resources-socket", str(kubelet.socket))

    assert "pod_devices" not in report
    assert report["pod_resources_error"] == f"PodResources socket {kubelet.socket} does not exist"


def test_a_socket_nobody_listens_on_is_an_unavailable_error(
    replay_node: ReplayNode, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket as sockets

    _, proc_root = replay_node("h100-80gb-no-mig")
    directory = Path(tempfile.mkdtemp(prefix="kubelet-"))
    path = directory / "kubelet.sock"
    stale = sockets.socket(sockets.AF_UNIX)
    stale.bind(str(path))  # a socket file left by a kubelet that died: nothing accepts on it
    stale.close()
    try:
        report = _dry_run(proc_root, capsys, "--pod-resources-socket", str(path), "--pod-resources-timeout", "1")
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    assert "pod_devices" not in report
    assert report["pod_resources_error"].startswith("PodResources List failed: UNAVAILABLE: ")
    assert "Connection refused" in report["pod_resources_error"]

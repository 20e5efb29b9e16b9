"""End to end on the test cluster: a pod the real scheduler places on a kwok GPU node runs, and the
agent's report says it holds a GPU while it runs and nothing once it has ended.

The node's kubelet side is the fake kubelet (``tests/agent/fake_kubelet.py``) fed by
``KubeletMirror``, which allocates GPU UUIDs to the node's live pods as the kubelet's device
manager does; the agent reads it over the real PodResources protocol, with NVML replayed from the
8 x H200 recording (whose UUIDs the node's devices are) and no host processes.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from agent.__main__ import EXIT_OK, run
from agent.report import load_schema
from kube_testenv import FakeGPUNodes, GPUNodeSpec, wait_for
from kube_testenv.workloads import gpu_pod, with_lifetime
from tests.agent.fake_kubelet import FakeKubelet
from tests.agent.kubelet_mirror import KubeletMirror
from tests.agent.nvml_replay import NvmlReplay, load_recording
from tests.agent.schema_subset import validate

RECORDING = "h200-8gpu-node"


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    directory = Path(tempfile.mkdtemp(prefix="kubelet-"))
    with FakeKubelet(directory / "kubelet.sock") as fake:
        yield fake
    shutil.rmtree(directory, ignore_errors=True)


def _phase(api: client.ApiClient, namespace: str, name: str, phase: str) -> None:
    core = client.CoreV1Api(api)
    wait_for(lambda: core.read_namespaced_pod(name, namespace).status.phase == phase, timeout=30,
             what=f"{namespace}/{name} {phase}")


def _report(node: str, proc_root: Path, socket: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    argv = ["--once", "--dry-run", "--node-name", node, "--proc-root", str(proc_root)]
    assert run([*argv, "--pod-resources-socket", str(socket)], {}) == EXIT_OK
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert validate(report, load_schema()) == []
    return report


def _by_pod(report: dict[str, Any]) -> dict[str, list[str]]:
    held: dict[str, list[str]] = {}
    for device in report["pod_devices"]:
        held.setdefault(device["pod"], []).append(device["device_id"])
    return held


def test_a_kwok_pod_holds_its_gpu_in_the_agents_report_while_it_runs_and_not_after(
    kube_api_client: client.ApiClient,
    kube_namespace: str,
    kwok_gpu_nodes: FakeGPUNodes,
    kubelet: FakeKubelet,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    recording = load_recording(RECORDING)
    NvmlReplay(recording).install(monkeypatch)
    proc_root = tmp_path / "proc"  # kwok's pods run no process: no cgroup names a UID to join
    proc_root.mkdir()
    uuids = [device["nvmlDeviceGetUUID"] for device in recording["devices"]]
    pool = {"gpuportal.test/pool": uuid.uuid4().hex[:12]}
    node = f"kwok-{pool['gpuportal.test/pool']}"
    kwok_gpu_nodes.add(GPUNodeSpec(node, gpus=len(uuids), product="NVIDIA-H200", labels=pool))
    mirror = KubeletMirror(kubelet, kube_api_client, node, uuids)
    core = client.CoreV1Api(kube_api_client)

    core.create_namespaced_pod(kube_namespace, with_lifetime(gpu_pod("train", gpus=2, node_selector=pool), run_for="3s"))
    core.create_namespaced_pod(kube_namespace, gpu_pod("serve", gpus=1, node_selector=pool))
    _phase(kube_api_client, kube_namespace, "train", "Running")
    _phase(kube_api_client, kube_namespace, "serve", "Running")
    mirror.sync()
    running = _report(node, proc_root, kubelet.socket, capsys)

    _phase(kube_api_client, kube_namespace, "train", "Succeeded")
    mirror.sync()
    ended = _report(node, proc_root, kubelet.socket, capsys)

    held = _by_pod(running)
    assert sorted(held) == ["serve", "train"] and len(held["train"]) == 2 and len(held["serve"]) == 1
    assert set(held["train"]) | set(held["serve"]) <= set(uuids) and not set(held["train"]) & set(held["serve"])
    assert {(d["namespace"], d["sharing"]) for d in running["pod_devices"]} == {(kube_namespace, "exclusive")}
    assert _by_pod(ended) == {"serve": held["serve"]}  # train's GPUs were freed when it ended
    assert running["pod_resources_error"] is None and ended["pod_resources_error"] is None
    assert all(d["pod_uid"] is None for d in running["pod_devices"])

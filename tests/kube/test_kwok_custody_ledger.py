"""Issue 33's "Done when" on the test cluster with kwok, end to end: the portal's grant, its pod
placed by the real scheduler on a kwok node, run and ended by kwok, the node agent's reports
posted to the portal's real report endpoint at each step, and the custody ledger's answer.

The kwok node carries the name of the portal's node where the grant is booked (the World's
``h100-0``, its GPUs named by the agent recording's UUIDs, as ``tests/custody`` names them).
``KubeletMirror`` plays the node's device manager, giving each new pod the first free GPU in its
order, and the agent's own collector reads it over the real PodResources protocol through the
fake kubelet's socket, with NVML replayed from the recording. The mirror's order is arranged so
that the stray pod (created first) gets a GPU the grant does not book and the granted pod then
gets the booked one. Reports go out as the agent's loop sends them: one agent start, sequence
numbers 1, 2, ..., each after the state it shows was reached (polled, never slept for).
"""

from __future__ import annotations

import datetime
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from rest_framework.test import APIClient

from agent.collector import ReportContext, collect_report
from agent.nvml_calls import nvml_session
from agent.pod_resources import PodResourcesSettings, add_pod_devices
from agent.report import load_schema
from audit.models import AuditEvent
from clusters.models import Gpu, Node
from custody.chain import time_text
from custody.observations import parse_time
from custody.verify import BundleDefect, bundle_verify
from custody.verify import main as verify_main
from kube_testenv import FakeGPUNodes, GPUNodeSpec, KubeTestCluster, wait_for
from kube_testenv.workloads import gpu_pod, with_lifetime
from telemetry.models import NodeToken
from tests.agent.fake_kubelet import FakeKubelet
from tests.agent.kubelet_mirror import KubeletMirror
from tests.agent.nvml_replay import NvmlReplay, load_recording
from tests.agent.schema_subset import validate
from tests.conftest import World
from tests.custody.scene import NODE, h100_grant
from tests.kube.kwok_scene import node_pool
from tests.telemetry.fixtures import issue_token, post_report  # noqa: F401 (fixture)

RECORDING = "h200-8gpu-node"


class NodeAgent:
    """The node's agent: its collector and PodResources reader, one start, sequence from 1; each
    report is posted to the portal's report endpoint with the node's token."""

    def __init__(self, *, token: str, socket: Path, proc_root: Path) -> None:
        self.token, self.proc_root = token, proc_root
        self.settings = PodResourcesSettings(socket=socket)
        self.started = datetime.datetime.now(datetime.UTC)
        self.sent: list[dict[str, Any]] = []
        self.portal = APIClient()

    def report(self) -> dict[str, Any]:
        context = ReportContext(node_name=NODE, sequence=len(self.sent) + 1, agent_started_at=self.started,
                                interval_seconds=30, proc_root=self.proc_root)  # fmt: skip
        with nvml_session():
            report: dict[str, Any] = dict(collect_report(context, now=datetime.datetime.now(datetime.UTC)))
        add_pod_devices(report, self.settings)  # type: ignore[arg-type]
        report["clock_offset_seconds"] = 0.0  # the agent and the portal read one host clock here
        assert validate(report, load_schema()) == [] and report["pod_resources_error"] is None
        response = post_report(self.portal, NODE, report, self.token)
        assert response.status_code == 200 and response.json()["accepted"] is True, response.content
        self.sent.append(report)
        return report

    def at(self, sequence: int) -> datetime.datetime:
        return parse_time(self.sent[sequence - 1]["collected_at"])


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    directory = Path(tempfile.mkdtemp(prefix="kubelet-"))
    with FakeKubelet(directory / "kubelet.sock") as fake:
        yield fake
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def tenant_namespace(world: World, kube_cluster: KubeTestCluster) -> Iterator[str]:
    """The project's tenant namespace (its slug, as the portal names it) on the test cluster."""
    name = world.seg.slug
    kube_cluster.create_namespace(name)
    yield name
    kube_cluster.delete_namespace(name)


def _phase(core: client.CoreV1Api, namespace: str, name: str, phase: str) -> Any:
    def reached() -> Any:
        pod = core.read_namespaced_pod(name, namespace)
        return pod if pod.status.phase == phase else None

    return wait_for(reached, timeout=30, interval=0.05, what=f"{namespace}/{name} {phase}")


def _gone(core: client.CoreV1Api, namespace: str, name: str) -> None:
    def deleted() -> bool:
        try:
            core.read_namespaced_pod(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    wait_for(deleted, timeout=30, interval=0.05, what=f"{namespace}/{name} deleted")


def _held(report: dict[str, Any]) -> dict[str, list[str]]:
    held: dict[str, list[str]] = {}
    for device in report["pod_devices"]:
        held.setdefault(device["pod"], []).append(device["device_id"])
    return held


def _answer(world: World, gpu: str, **params: str) -> Any:
    return world.client("auditor").get("/api/v1/custody/", {"device": gpu, **params})


def test_a_granted_pod_runs_ends_and_the_ledger_names_it_while_a_stray_pod_raises_the_alarm(
    world: World,
    kube_api_client: client.ApiClient,
    kwok_gpu_nodes: FakeGPUNodes,
    kubelet: FakeKubelet,
    tenant_namespace: str,
    issue_token: Callable[..., tuple[NodeToken, str]],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    recording = load_recording(RECORDING)
    NvmlReplay(recording).install(monkeypatch)
    uuids = [device["nvmlDeviceGetUUID"] for device in recording["devices"]]
    for index, gpu_uuid in enumerate(uuids):
        Gpu.objects.filter(node=Node.objects.get(cluster=world.cluster, name=NODE), index=index).update(uuid=gpu_uuid)
    allocation = h100_grant(world)  # vision-seg's one H100, approved and booked on h100-0
    reservation = allocation.reservations.get()
    assert reservation.node.name == NODE
    [booked_index] = reservation.gpu_indices
    booked = uuids[booked_index]
    others = [gpu_uuid for gpu_uuid in uuids if gpu_uuid != booked]
    _, token = issue_token(NODE)
    proc_root = tmp_path / "proc"  # kwok's pods run no process: no cgroup names a pod UID
    proc_root.mkdir()
    agent = NodeAgent(token=token, socket=kubelet.socket, proc_root=proc_root)

    pool = node_pool()
    kwok_gpu_nodes.add(GPUNodeSpec(NODE, gpus=len(uuids), product="NVIDIA-H100-80GB-HBM3", labels=pool))
    mirror = KubeletMirror(kubelet, kube_api_client, NODE, [others[0], booked, *others[1:]])
    core = client.CoreV1Api(kube_api_client)
    agent.report()  # 1: nothing runs yet

    core.create_namespaced_pod(tenant_namespace, gpu_pod("stray", gpus=1, node_selector=pool))
    _phase(core, tenant_namespace, "stray", "Running")
    mirror.sync()
    assert _held(agent.report()) == {"stray": [others[0]]}  # 2: on a GPU the grant does not book

    train = with_lifetime(gpu_pod("train", gpus=1, node_selector=pool), run_for="5s", remove_after="1s")
    core.create_namespaced_pod(tenant_namespace, train)
    running = _phase(core, tenant_namespace, "train", "Running")
    assert running.spec.node_name == NODE  # the real scheduler's choice: the pool's only node
    mirror.sync()
    assert _held(agent.report()) == {"stray": [others[0]], "train": [booked]}  # 3: the grant's pod on its GPU

    finished = _phase(core, tenant_namespace, "train", "Succeeded")
    mirror.sync()
    assert _held(agent.report()) == {"stray": [others[0]]}  # 4: train ended, its GPU freed
    _gone(core, tenant_namespace, "train")
    mirror.sync()
    agent.report()  # 5: removed after its remove-after

    # Who held the granted GPU, from when to when, with the grant: one closed interval, exactly the reports'.
    response = _answer(world, booked)
    assert response.status_code == 200, response.content
    rows = [row for row in response.json()["results"] if row["state"] != "gap"]
    assert [(row["namespace"], row["pod"], row["state"]) for row in rows] == [(tenant_namespace, "train", "closed")]
    [row] = rows
    assert (row["allocation_id"], row["attribution"], row["node"], row["gpu_uuid"]) == (
        allocation.pk,
        "granted",
        NODE,
        booked,
    )
    assert (row["started_at"], row["ended_at"], row["gone_at"]) == (
        time_text(agent.at(3)),
        time_text(agent.at(3)),
        time_text(agent.at(4)),
    )
    assert not row["pod_uid"]  # no process of a kwok pod names its UID; PodResources does not either
    # Both ends bounded by adjacent reports; "medium", not "high", only because the pod UID is unknown.
    assert (row["start_observed"], row["end_observed"], row["confidence"]) == ("appeared", "gone", "medium")
    ran = finished.status.container_statuses[0].state.terminated  # kwok's own times bracket the ledger's
    assert ran.started_at <= agent.at(3) and ran.finished_at <= agent.at(4)

    # The stray pod on a GPU its project was not granted: the alarm, and a row attributed to no grant.
    raised = [e for e in AuditEvent.objects.filter(action="custody.alarm_raised") if e.after["alarm"] == "ungranted"]
    assert [(e.details["pod"], e.details["device_id"]) for e in raised] == [("stray", others[0])]
    [stray] = _answer(world, others[0]).json()["results"]
    assert (stray["pod"], stray["state"], stray["attribution"], stray["allocation_id"]) == (
        "stray",
        "open",
        "ungranted",
        None,
    )

    _the_bundle_verifies_offline_and_a_tampered_copy_does_not(world, booked, tmp_path)


def _the_bundle_verifies_offline_and_a_tampered_copy_does_not(world: World, gpu: str, folder: Path) -> None:
    response = _answer(world, gpu, output="bundle")
    assert response.status_code == 200
    genuine, tampered = folder / "custody.bundle", folder / "tampered.bundle"
    genuine.write_bytes(response.content)
    lines = response.content.decode().splitlines(keepends=True)
    assert bundle_verify(lines).startswith("OK custody bundle: 1 answer rows")
    assert verify_main([str(genuine)]) == 0
    edited = [line.replace('"train"', '"someone-else"', 1) if '"type": "event"' in line else line for line in lines]
    assert edited != lines
    tampered.write_text("".join(edited))
    with pytest.raises(BundleDefect, match="altered"):
        bundle_verify(edited)
    assert verify_main([str(tampered)]) != 0

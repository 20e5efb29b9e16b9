"""Fake GPU nodes look like GFD/device-plugin nodes and stay Ready."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from kube_testenv import FakeGPUNodes, GPUNodeSpec, KubeTestCluster, wait_for
from kube_testenv.gpu_nodes import NODE_LEASE_NAMESPACE


def test_gpu_node_spec_advertises_whole_gpus_by_default() -> None:
    spec = GPUNodeSpec("n", gpus=8)
    assert spec.capacity()["nvidia.com/gpu"] == "8"
    labels = spec.node_labels()
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.memory"] == "81559"
    assert labels["nvidia.com/gpu.family"] == "hopper"
    assert labels["nvidia.com/mig.strategy"] == "none"


def test_gpu_node_spec_mixed_mig_advertises_profiles_and_remaining_whole_gpus() -> None:
    spec = GPUNodeSpec("n", gpus=8, mig_strategy="mixed", mig_gpus=2, mig_devices={"1g.10gb": 14})
    capacity = spec.capacity()
    assert capacity["nvidia.com/gpu"] == "6"
    assert capacity["nvidia.com/mig-1g.10gb"] == "14"
    labels = spec.node_labels()
    assert labels["nvidia.com/mig.capable"] == "true"
    assert labels["nvidia.com/mig-1g.10gb.count"] == "14"
    assert labels["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert labels["nvidia.com/mig-1g.10gb.slices.gi"] == "1"


def test_gpu_node_spec_time_slicing_renamed_and_not_renamed() -> None:
    renamed = GPUNodeSpec("n", gpus=2, sharing="time-slicing", replicas=4, rename_shared=True)
    assert renamed.capacity()["nvidia.com/gpu.shared"] == "8"
    assert "nvidia.com/gpu" not in renamed.capacity()
    assert renamed.node_labels()["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"

    plain = GPUNodeSpec("n", gpus=2, sharing="time-slicing", replicas=4)
    assert plain.capacity()["nvidia.com/gpu"] == "8"
    labels = plain.node_labels()
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mig_devices": {"1g.10gb": 7}},  # MIG devices need a MIG strategy
        {"mig_strategy": "mixed", "mig_devices": {"big": 1}},  # not a profile name
        {"sharing": "mps", "replicas": 1},  # sharing needs replicas >= 2
    ],
)
def test_gpu_node_spec_rejects_inconsistent_settings(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        GPUNodeSpec("n", **kwargs)  # type: ignore[arg-type]


def test_fake_gpu_node_is_registered_with_labels_capacity_and_ready_status(
    kube_api_client: client.ApiClient, fake_gpu_nodes: FakeGPUNodes
) -> None:
    name = f"gpu-{uuid.uuid4().hex[:8]}"
    spec = GPUNodeSpec(name, gpus=4, mig_strategy="mixed", mig_gpus=1, mig_devices={"1g.10gb": 7})
    fake_gpu_nodes.add(spec)

    node = client.CoreV1Api(kube_api_client).read_node(name)
    assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert node.metadata.labels["nvidia.com/mig.strategy"] == "mixed"
    for field in (node.status.capacity, node.status.allocatable):
        assert field["nvidia.com/gpu"] == "3"
        assert field["nvidia.com/mig-1g.10gb"] == "7"
        assert field["pods"] == "110"
    ready = next(c for c in node.status.conditions if c.type == "Ready")
    assert ready.status == "True"
    assert not [t for t in node.spec.taints or [] if t.key.startswith("node.kubernetes.io/")]


def test_heartbeat_renews_ready_condition_and_node_lease(
    kube_cluster: KubeTestCluster, kube_api_client: client.ApiClient
) -> None:
    name = f"gpu-{uuid.uuid4().hex[:8]}"
    coordination = client.CoordinationV1Api(kube_api_client)
    with FakeGPUNodes(kube_cluster.api_client, heartbeat_interval=1.0) as nodes:
        nodes.add(GPUNodeSpec(name))
        first = coordination.read_namespaced_lease(name, NODE_LEASE_NAMESPACE).spec.renew_time

        lease = wait_for(
            lambda: (
                spec
                if (spec := coordination.read_namespaced_lease(name, NODE_LEASE_NAMESPACE).spec).renew_time > first
                else None
            ),
            timeout=15,
            what="lease renewal",
        )
        assert lease.holder_identity == name
        assert nodes.heartbeats >= 1
    # Leaving the context removed the node.
    assert name not in [n.metadata.name for n in client.CoreV1Api(kube_api_client).list_node().items]

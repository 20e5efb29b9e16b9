"""A cluster without its GPU operator's namespace, against the real API server.

The node configurations (the device-plugin and MIG-manager ConfigMaps) live in the GPU operator's
namespace, which the operator owns: the portal never creates it (and so never prunes it). Without
it, the cluster-wide push delivers everything else, withholds the node configurations, and the
cluster reports the missing prerequisite once; once the namespace exists, the next cluster-wide
push or drift check delivers them and the report goes away.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from kubernetes import client

from allocations.grants import services as allocation_services
from allocations.models import Allocation, AllocationState
from clusters.models import ClusterDrift, ClusterPush, PushState
from delivery.tasks import clusters_drift_check_task
from tests.clusters.conftest import audit_head, audit_since
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)


def grant(world: World, *, flavor: str = "a100") -> Allocation:
    start = timezone.now()
    allocation = allocation_services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=getattr(world, flavor), quantity=1,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=7), justification="x",
    )
    allocation_services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    allocation.refresh_from_db()
    return allocation


def config_maps(core: Any, namespace: str) -> list[str]:
    try:
        items = core.list_namespaced_config_map(namespace, label_selector="app.kubernetes.io/managed-by=gpuportal").items
    except client.ApiException as error:
        if error.status == 404:
            return []
        raise
    return sorted(item.metadata.name for item in items)


def namespace_exists(core: Any, name: str) -> bool:
    try:
        core.read_namespace(name)
    except client.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


@pytest.fixture
def missing(kube_world: World, core: Any) -> str:
    """The cluster names an operator namespace its API server does not have."""
    name = f"gpu-operator-{uuid.uuid4().hex[:6]}"
    kube_world.cluster.gpu_operator_namespace = name
    kube_world.cluster.save(update_fields=["gpu_operator_namespace"])
    assert not namespace_exists(core, name)
    return name


def cluster_page(world: World) -> str:
    browser = Client()
    browser.force_login(world.users["platform"])
    response = browser.get(reverse("cluster-detail", kwargs={"cluster_id": world.cluster.pk}))
    assert response.status_code == 200
    return str(response.content.decode())


def test_a_missing_operator_namespace_is_reported_once_and_the_rest_is_pushed(
    kube_world: World, core: Any, kube_cluster: Any, missing: str, fake_gpu_nodes: Any
) -> None:
    from kube_testenv.gpu_nodes import GPUNodeSpec

    fake_gpu_nodes.add(GPUNodeSpec(name="a100-0", product="NVIDIA-A100-SXM4-80GB", compute_capability=(8, 0),
                                   mig_strategy="mixed", mig_gpus=8, mig_devices={"1g.10gb": 7}))
    labels_before = dict(core.read_node("a100-0").metadata.labels)
    head = audit_head()

    first = grant(kube_world)
    second = grant(kube_world, flavor="mig")
    allocation_services.allocation_release(actor=kube_world.users["nlp_member"], allocation_id=second.pk)
    clusters_drift_check_task()
    clusters_drift_check_task()

    # The allocation landed, and every cluster-wide push did what it could, once, without failing.
    assert first.state == AllocationState.ACTIVE
    shared = ClusterPush.objects.filter(cluster=kube_world.cluster, project__isnull=True)
    assert shared.count() == 3
    assert {(push.state, push.attempts, push.last_error) for push in shared} == {(PushState.DONE, 1, "")}
    with kube_cluster.api_client() as api:
        assert client.SchedulingV1Api(api).read_priority_class("gpu-standard").value == 1000
    assert not namespace_exists(core, missing)  # the portal does not create what the operator owns
    assert config_maps(core, missing) == []
    assert core.read_node("a100-0").metadata.labels == labels_before  # no label naming a config that is not there

    # The prerequisite is reported on the cluster (API and page), audited once, and is no drift.
    kube_world.cluster.refresh_from_db()
    assert kube_world.cluster.last_sync_error.startswith(f"Missing prerequisite: namespace {missing} does not exist")
    body = kube_world.client("platform").get(f"/api/v1/clusters/{kube_world.cluster.pk}/").json()
    assert body["missing_prerequisite"] == kube_world.cluster.last_sync_error
    assert f"namespace {missing} does not exist" in cluster_page(kube_world)
    reported = [event for event in audit_since(head, "cluster.push_failed") if missing in event.details["error"]]
    assert len(reported) == 1
    assert not ClusterDrift.objects.filter(cluster=kube_world.cluster).exists()


def test_once_the_namespace_exists_the_configs_land_and_the_report_goes(
    kube_world: World, core: Any, missing: str, fake_gpu_nodes: Any
) -> None:
    from kube_testenv.gpu_nodes import GPUNodeSpec

    fake_gpu_nodes.add(GPUNodeSpec(name="a100-0", product="NVIDIA-A100-SXM4-80GB", compute_capability=(8, 0),
                                   mig_strategy="mixed", mig_gpus=8, mig_devices={"1g.10gb": 7}))
    grant(kube_world, flavor="mig")
    core.create_namespace({"metadata": {"name": missing, "labels": {"owner": "gpu-operator"}}})

    clusters_drift_check_task()

    assert config_maps(core, missing) == ["gpuportal-device-plugin-configs", "gpuportal-mig-parted-config"]
    assert core.read_node("a100-0").metadata.labels["nvidia.com/device-plugin.config"] == "mig-mixed"
    kube_world.cluster.refresh_from_db()
    assert kube_world.cluster.last_sync_error == ""
    body = kube_world.client("platform").get(f"/api/v1/clusters/{kube_world.cluster.pk}/").json()
    assert body["missing_prerequisite"] == ""
    assert "Missing prerequisite" not in cluster_page(kube_world)
    # What the portal had withheld is no hand-made drift.
    assert not ClusterDrift.objects.filter(cluster=kube_world.cluster).exists()

    # The operator's namespace is not the portal's: moving the configs elsewhere never deletes it.
    namespace = core.read_namespace(missing)
    assert namespace.metadata.labels.get("app.kubernetes.io/managed-by") is None
    kube_world.cluster.gpu_operator_namespace = "gpu-operator"
    kube_world.cluster.save(update_fields=["gpu_operator_namespace"])
    clusters_drift_check_task()
    assert namespace_exists(core, missing) and core.read_namespace(missing).metadata.deletion_timestamp is None

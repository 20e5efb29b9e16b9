"""Operations on real clusters: discovery, cluster_sync --dry-run, the API actions, two clusters."""

from __future__ import annotations

import datetime
import io
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone
from kubernetes import client

from allocations.grants import services as allocation_services
from allocations.models import AllocationState
from audit.models import AuditEvent
from clusters.inventory import GpuSpec, node_upsert
from clusters.models import Cluster, Node
from kube_testenv.gpu_nodes import GPUNodeSpec
from tests.clusters.conftest import audit_head, audit_since, operator_namespace, use_kubeconfig
from tests.clusters.test_kube_delivery import grant
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)


def test_discovery_reads_gpu_nodes_and_their_labels_into_the_inventory(kube_world: World, fake_gpu_nodes: Any) -> None:
    fake_gpu_nodes.add(GPUNodeSpec(name="disc-h100", gpus=4, product="NVIDIA-H100-80GB-HBM3", sharing="mps", replicas=4,
                                   rename_shared=True, mig_capable=False, cpu="64", memory="512Gi"))
    head = audit_head()
    out = io.StringIO()
    call_command("cluster_discover", kube_world.cluster.name, stdout=out)

    node = Node.objects.get(cluster=kube_world.cluster, name="disc-h100")
    assert (node.cpu_millicores, node.memory_mib) == (64000, 512 * 1024)
    assert [(g.index, g.model, g.memory_mib, g.mig_capable) for g in node.gpus.all()] == [
        (i, "NVIDIA-H100-80GB-HBM3", 81559, False) for i in range(4)
    ]
    assert node.labels["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert "disc-h100: 4 × NVIDIA-H100-80GB-HBM3" in out.getvalue()
    assert not Node.objects.get(cluster=kube_world.cluster, name="a100-0").is_schedulable  # not in this cluster
    assert audit_since(head, "cluster.discovered")[0].details["gone"] == ["a100-0", "a100-1", "h100-0"]


def test_cluster_sync_dry_run_prints_the_diff_and_changes_nothing(kube_world: World, core: Any) -> None:
    grant(kube_world, quantity=2)
    core.patch_namespaced_resource_quota("gpuportal-gpu-quota", kube_world.llm.slug,
                                         {"spec": {"hard": {"requests.nvidia.com/gpu": "9"}}})
    out = io.StringIO()
    call_command("cluster_sync", kube_world.cluster.name, "--dry-run", stdout=out)

    text = out.getvalue()
    assert f"~ ResourceQuota {kube_world.llm.slug}/gpuportal-gpu-quota" in text
    assert "spec.hard.requests.nvidia.com/gpu: '9' -> '2'" in text
    assert "would change 1 object(s)" in text
    assert core.read_namespaced_resource_quota("gpuportal-gpu-quota", kube_world.llm.slug).spec.hard[
        "requests.nvidia.com/gpu"] == "9"

    call_command("cluster_sync", kube_world.cluster.name, stdout=io.StringIO())
    assert core.read_namespaced_resource_quota("gpuportal-gpu-quota", kube_world.llm.slug).spec.hard[
        "requests.nvidia.com/gpu"] == "2"


def test_the_api_stores_a_kubeconfig_but_never_returns_it(kube_world: World, kube_cluster: Any) -> None:
    kubeconfig = kube_cluster.kubeconfig.read_text()
    url = f"/api/v1/clusters/{kube_world.cluster.pk}/kubeconfig/"
    assert kube_world.client("nlp_admin").put(url, {"kubeconfig": kubeconfig}, format="json").status_code == 403
    bad = kube_world.client("platform").put(url, {"kubeconfig": "just: text"}, format="json")
    assert bad.status_code == 400 and "kubeconfig" in bad.json()["error"]["fields"]
    assert kube_world.client("platform").put(url, {"kubeconfig": kubeconfig}, format="json").status_code == 204

    detail = kube_world.client("platform").get(f"/api/v1/clusters/{kube_world.cluster.pk}/")
    assert detail.json()["has_kubeconfig"] is True
    assert "client-key-data" not in detail.content.decode() and "kubeconfig_encrypted" not in detail.json()
    stored = bytes(Cluster.objects.get(pk=kube_world.cluster.pk).kubeconfig_encrypted)
    assert b"client-key-data" not in stored
    event = AuditEvent.objects.filter(action="cluster.kubeconfig_set").order_by("-seq").first()
    assert event is not None and "BEGIN" not in event.record and event.after["server"] == kube_cluster.server


def test_the_api_syncs_and_discovers_for_platform_admins_only(kube_world: World, fake_gpu_nodes: Any) -> None:
    fake_gpu_nodes.add(GPUNodeSpec(name="api-a100", gpus=2, product="NVIDIA-A100-SXM4-80GB"))
    base = f"/api/v1/clusters/{kube_world.cluster.pk}"
    assert kube_world.client("nlp_admin").post(f"{base}/discover/").status_code == 403
    found = kube_world.client("platform").post(f"{base}/discover/")
    assert found.status_code == 200 and [n["name"] for n in found.json()] == ["api-a100"]
    queued = kube_world.client("platform").post(f"{base}/sync/")
    assert queued.status_code == 202 and queued.json() == {"queued": 1}
    pushes = kube_world.client("platform").get(f"{base}/pushes/").json()["results"]
    assert pushes[0]["state"] == "done"


def test_discovery_of_an_unreachable_cluster_is_a_clear_502(kube_world: World) -> None:
    kubeconfig = "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n" \
                 "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:9', insecure-skip-tls-verify: true}}]\n" \
                 "users: [{name: u, user: {token: t}}]\n"
    use_kubeconfig(kube_world.cluster, kubeconfig)
    response = kube_world.client("platform").post(f"/api/v1/clusters/{kube_world.cluster.pk}/discover/")
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "cluster_unreachable" and "unreachable" in response.json()["error"]["message"]


@pytest.fixture
def second_control_plane() -> Iterator[Any]:
    from kube_testenv.cluster import KubeTestCluster
    from kube_testenv.paths import BinariesMissing, find_binaries

    try:
        binaries = find_binaries()
    except BinariesMissing as missing:
        pytest.skip(str(missing))
    with KubeTestCluster(binaries) as cluster:
        yield cluster


def test_two_clusters_each_get_only_their_own_allocations(kube_world: World, second_control_plane: Any, core: Any) -> None:
    other = Cluster.objects.create(name="second")
    node_upsert(actor=None, cluster=other, name="second-h100", cpu_millicores=64000, memory_mib=524288,
                gpus=[GpuSpec(index=i, model=kube_world.h100.gpu_model, memory_mib=81920) for i in range(4)])
    use_kubeconfig(other, second_control_plane.kubeconfig.read_text())
    operator_namespace(second_control_plane)
    on_first = grant(kube_world, quantity=1)
    start = timezone.now()
    on_second = allocation_services.allocation_request(
        actor=kube_world.users["vision_member"], project=kube_world.seg, flavor=kube_world.h100, quantity=3,
        priority_class=kube_world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1),
        justification="x", cluster=other,
    )
    allocation_services.allocation_approve(actor=kube_world.users["vision_admin"], allocation_id=on_second.pk)
    on_second.refresh_from_db()
    assert on_first.state == on_second.state == AllocationState.ACTIVE and on_second.cluster == other

    with second_control_plane.api_client() as api:
        second = client.CoreV1Api(api)
        assert second.read_namespaced_resource_quota("gpuportal-gpu-quota", kube_world.seg.slug).spec.hard[
            "requests.nvidia.com/gpu"] == "3"
        with pytest.raises(client.ApiException):
            second.read_namespace(kube_world.llm.slug)
    with pytest.raises(client.ApiException):
        core.read_namespace(kube_world.seg.slug)
    assert core.read_namespace(kube_world.llm.slug)

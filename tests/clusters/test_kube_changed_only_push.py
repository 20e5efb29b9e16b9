"""Pushes of the cluster-wide objects against the real API server send only what changed.

Counted, never timed: every request the driver sends (``KubeRest.request``) and the node configs
rendered. The pushes are held in the outbox and run by hand, so each count is one push's.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone

from allocations.grants import services as allocation_services
from allocations.models import Allocation, Flavor
from clusters import outbox
from clusters.models import AppliedObject, ClusterDrift, ClusterPush, PushState
from delivery import node_configs
from delivery.drivers import DriverError
from delivery.drivers.kubernetes import KubeRest
from delivery.services import cluster_sync_shared
from delivery.tasks import clusters_drift_check_task
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)

POOL = "pool.gpuportal.io/"


class Requests:
    """Every request the Kubernetes driver sends, as (method, path), and the Nodes rendered."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[tuple[str, str]] = []
        self.fail: set[tuple[str, str]] = set()
        self.rendered = 0
        request = KubeRest.request

        def counted(rest: KubeRest, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
            self.sent.append((method, path))
            if (method, path) in self.fail:
                return 500, {"message": "etcdserver: request timed out"}
            return request(rest, method, path, **kwargs)

        render = node_configs.render_node_labels

        def rendered(plan: node_configs.NodePlan) -> dict[str, Any]:
            self.rendered += 1
            return render(plan)

        monkeypatch.setattr(KubeRest, "request", counted)
        monkeypatch.setattr(node_configs, "render_node_labels", rendered)

    def reset(self) -> None:
        self.sent.clear()
        self.rendered = 0

    @property
    def writes(self) -> list[tuple[str, str]]:
        return [(method, path) for method, path in self.sent if method != "GET"]


@pytest.fixture
def held(kube_world: World, fake_gpu_nodes: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """The World's nodes registered on the API server; pushes stay in the outbox until run by hand."""
    from kube_testenv.gpu_nodes import GPUNodeSpec

    fake_gpu_nodes.add(GPUNodeSpec(name="h100-0"))
    fake_gpu_nodes.add(GPUNodeSpec(name="a100-0", product="NVIDIA-A100-SXM4-80GB", compute_capability=(8, 0)))
    fake_gpu_nodes.add(GPUNodeSpec(name="a100-1", product="NVIDIA-A100-SXM4-80GB", compute_capability=(8, 0)))
    monkeypatch.setattr(outbox, "push_dispatch", lambda **kwargs: False)
    cluster_sync_shared(cluster_id=kube_world.cluster.pk)
    yield kube_world


def approve(world: World, flavor: Flavor, quantity: int = 1) -> Allocation:
    start = timezone.now()
    allocation = allocation_services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=flavor, quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="x",
    )
    return allocation_services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch) -> Requests:
    return Requests(monkeypatch)


def test_an_approval_on_one_node_reads_and_applies_that_node_alone(held: World, requests: Requests, core: Any) -> None:
    approve(held, held.h100)
    result = cluster_sync_shared(cluster_id=held.cluster.pk)

    assert requests.rendered == 1
    assert requests.sent == [("GET", "/api/v1/nodes/h100-0"), ("PATCH", "/api/v1/nodes/h100-0")]
    assert result.applied == 1 and result.pruned == 0
    assert core.read_node("h100-0").metadata.labels[f"{POOL}{held.llm.slug}"] == "booked"
    assert f"{POOL}{held.llm.slug}" not in (core.read_node("a100-0").metadata.labels or {})


def test_a_push_with_nothing_changed_sends_no_request_at_all(held: World, requests: Requests) -> None:
    approve(held, held.h100)
    cluster_sync_shared(cluster_id=held.cluster.pk)
    requests.reset()

    result = cluster_sync_shared(cluster_id=held.cluster.pk)

    assert requests.sent == [] and requests.rendered == 0
    assert result.applied == 0 and result.unchanged == AppliedObject.objects.filter(cluster=held.cluster).count()


def test_a_failed_apply_is_applied_again_by_the_next_push(held: World, requests: Requests, core: Any) -> None:
    approve(held, held.h100)
    requests.fail.add(("PATCH", "/api/v1/nodes/h100-0"))
    with pytest.raises(DriverError, match="HTTP 500"):
        cluster_sync_shared(cluster_id=held.cluster.pk)
    assert f"{POOL}{held.llm.slug}" not in (core.read_node("h100-0").metadata.labels or {})

    requests.fail.clear()
    requests.reset()
    result = cluster_sync_shared(cluster_id=held.cluster.pk)

    assert result.applied == 1 and ("PATCH", "/api/v1/nodes/h100-0") in requests.writes
    assert core.read_node("h100-0").metadata.labels[f"{POOL}{held.llm.slug}"] == "booked"


def test_a_label_removed_by_hand_is_repaired_by_the_drift_check_not_the_push(
    held: World, requests: Requests, core: Any
) -> None:
    approve(held, held.h100)
    cluster_sync_shared(cluster_id=held.cluster.pk)
    ClusterPush.objects.update(state=PushState.DONE)  # the project's push is not this test's: none pending
    core.patch_node("h100-0", {"metadata": {"labels": {f"{POOL}{held.llm.slug}": None}}})
    requests.reset()

    cluster_sync_shared(cluster_id=held.cluster.pk)
    assert requests.sent == []  # the push trusts what it applied: the drift check is what reads the cluster

    clusters_drift_check_task()

    assert core.read_node("h100-0").metadata.labels[f"{POOL}{held.llm.slug}"] == "booked"
    assert ClusterDrift.objects.filter(cluster=held.cluster, kind="Node", name="h100-0").exists()
    requests.reset()
    cluster_sync_shared(cluster_id=held.cluster.pk)
    assert requests.writes == []


def test_a_changed_cluster_wide_object_is_applied_and_the_objects_no_longer_wanted_pruned(
    held: World, requests: Requests, core: Any
) -> None:
    held.preemptible.delete()  # its PriorityClass is no longer wanted
    approve(held, held.h100)

    result = cluster_sync_shared(cluster_id=held.cluster.pk)

    assert result.pruned == 1 and requests.rendered == 1  # the one node whose bookings changed
    assert ("DELETE", "/apis/scheduling.k8s.io/v1/priorityclasses/gpu-preemptible") in requests.writes
    assert Counter(method for method, _ in requests.writes) == Counter({"PATCH": 1, "DELETE": 1})
    assert not AppliedObject.objects.filter(cluster=held.cluster, kind="PriorityClass", name="gpu-preemptible").exists()

"""A scheduled allocation on the real API server: nothing of it reaches the cluster before its
start, whatever is pushed meanwhile; once the timeline starts it, its namespace and quota do."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.utils import timezone
from kubernetes import client

from allocations.grants import services
from allocations.grants.scheduling import allocations_start_due
from allocations.models import Allocation, AllocationState
from clusters.models import ClusterPush, PushState
from clusters.outbox import pushes_dispatch
from delivery.services import cluster_sync, cluster_sync_project
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)


def scheduled(world: World, *, quantity: int, starts_in: datetime.timedelta) -> Allocation:
    start = timezone.now() + starts_in
    request = services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1),
        justification="a booked training run",
    )
    return services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=request.pk)


def namespace_missing(core: Any, name: str) -> bool:
    try:
        core.read_namespace(name)
    except client.ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


@pytest.mark.parametrize("policy", ["delete-namespace", "retain-namespace"])
def test_a_scheduled_allocation_creates_nothing_before_its_start_and_everything_after(
    kube_world: World, core: Any, settings: Any, policy: str
) -> None:
    settings.GPUPORTAL_KUBE_PRUNE_POLICY = policy  # retained: not even an idle namespace before the start
    world = kube_world
    allocation = scheduled(world, quantity=3, starts_in=datetime.timedelta(minutes=10))
    assert allocation.state == AllocationState.SCHEDULED

    # Whatever is delivered before the start leaves the project off the cluster: the pending
    # pushes, a push of the project, a full sync.
    pushes_dispatch()
    assert not ClusterPush.objects.filter(state=PushState.PENDING).exists()
    cluster_sync_project(cluster_id=world.cluster.pk, project_id=world.llm.pk)
    cluster_sync(cluster_id=world.cluster.pk)
    assert namespace_missing(core, world.llm.slug)
    assert allocations_start_due() == 0  # not yet

    assert allocations_start_due(now=allocation.starts_at + datetime.timedelta(seconds=1)) == 1

    allocation.refresh_from_db()
    assert allocation.state == AllocationState.ACTIVE
    assert core.read_namespace(world.llm.slug).metadata.labels["gpuportal.io/project"] == world.llm.slug
    hard = core.read_namespaced_resource_quota("gpuportal-gpu-quota", world.llm.slug).spec.hard
    assert hard["requests.nvidia.com/gpu"] == "3"
    assert core.read_namespaced_resource_quota("gpuportal-priority-gpu-standard", world.llm.slug).spec.hard == {
        "requests.nvidia.com/gpu": "3",
    }


def test_a_scheduled_allocation_does_not_raise_the_quota_of_a_project_already_on_the_cluster(
    kube_world: World, core: Any
) -> None:
    world = kube_world
    running = scheduled(world, quantity=1, starts_in=datetime.timedelta(0))
    running.refresh_from_db()
    assert running.state == AllocationState.ACTIVE
    later = scheduled(world, quantity=2, starts_in=datetime.timedelta(minutes=10))
    assert later.state == AllocationState.SCHEDULED

    cluster_sync(cluster_id=world.cluster.pk)
    quota = core.read_namespaced_resource_quota("gpuportal-gpu-quota", world.llm.slug)
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "1"

    assert allocations_start_due(now=later.starts_at + datetime.timedelta(seconds=1)) == 1
    quota = core.read_namespaced_resource_quota("gpuportal-gpu-quota", world.llm.slug)
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "3"

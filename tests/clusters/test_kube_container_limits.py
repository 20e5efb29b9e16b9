"""Per-container limits on the real API server: the portal's LimitRange and quota as pushed by the
Kubernetes driver, and what the API server's LimitRanger and ResourceQuota admission make of pods."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.utils import timezone
from kubernetes import client

from allocations.grants import services as allocation_services
from allocations.models import Allocation, Flavor
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)


def grant(world: World, flavor: Flavor, quantity: int) -> Allocation:
    start = timezone.now()
    allocation = allocation_services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=flavor, quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=7), justification="training",
    )
    allocation_services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    allocation.refresh_from_db()
    return allocation


def pod(name: str, resources: dict[str, Any] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "x"}
    if resources is not None:
        container["resources"] = resources
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"priorityClassName": "gpu-standard", "containers": [container]}}


@pytest.fixture
def granted(kube_world: World) -> World:
    """One whole A100 (8 cores, 64 GiB per unit) and two 1g.10gb slices (2 cores, 16 GiB per unit)."""
    grant(kube_world, kube_world.a100, 1)
    grant(kube_world, kube_world.mig, 2)
    return kube_world


def test_the_pushed_limit_range_and_quota_carry_defaults_maxima_and_limits(granted: World, core: Any) -> None:
    (entry,) = core.read_namespaced_limit_range("gpuportal-defaults", granted.llm.slug).spec.limits
    assert entry.type == "Container"
    assert entry.default_request == {"cpu": "100m", "memory": "256Mi"}
    assert entry.default == {"cpu": "2", "memory": "16Gi"}  # the smallest unit the project holds
    assert entry.max == {"cpu": "8", "memory": "64Gi"}  # the largest
    hard = core.read_namespaced_resource_quota("gpuportal-gpu-quota", granted.llm.slug).spec.hard
    assert hard["limits.cpu"] == hard["requests.cpu"] == "12"
    assert hard["limits.memory"] == hard["requests.memory"] == "96Gi"


def test_a_pod_naming_no_resources_is_admitted_under_the_quota_with_the_default_limits(granted: World, core: Any) -> None:
    created = core.create_namespaced_pod(granted.llm.slug, pod("plain"))
    resources = created.spec.containers[0].resources
    assert resources.limits == {"cpu": "2", "memory": "16Gi"}
    assert resources.requests == {"cpu": "100m", "memory": "256Mi"}
    # Requests without limits: the limits are still filled in, so the limits.* quota admits it.
    created = core.create_namespaced_pod(granted.llm.slug, pod("requests-only", {"requests": {"cpu": "1", "memory": "1Gi"}}))
    assert created.spec.containers[0].resources.limits == {"cpu": "2", "memory": "16Gi"}


def test_a_container_asking_for_more_than_the_largest_unit_is_refused_by_the_limit_range(granted: World, core: Any) -> None:
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(granted.llm.slug, pod("greedy", {"limits": {"memory": "100Gi"}}))
    assert refused.value.status == 403
    assert "maximum memory usage per Container is 64Gi, but limit is 100Gi" in refused.value.body
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(granted.llm.slug, pod("greedy-cpu", {"limits": {"cpu": "9"}}))
    assert "maximum cpu usage per Container is 8, but limit is 9" in refused.value.body
    # Exactly one big unit is allowed.
    core.create_namespaced_pod(granted.llm.slug, pod("one-unit", {"limits": {"cpu": "8", "memory": "64Gi"}}))


def test_containers_within_max_are_still_bounded_by_the_namespaces_limits_quota(granted: World, core: Any) -> None:
    core.create_namespaced_pod(granted.llm.slug, pod("big", {"limits": {"cpu": "8", "memory": "64Gi"}}))
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(granted.llm.slug, pod("big-again", {"limits": {"cpu": "8", "memory": "64Gi"}}))
    assert refused.value.status == 403 and "exceeded quota: gpuportal-gpu-quota" in refused.value.body


def test_a_tiny_flavor_renders_a_limit_range_the_api_server_accepts(kube_world: World, core: Any) -> None:
    Flavor.objects.filter(pk=kube_world.mig.pk).update(cpu_millicores_per_unit=50, memory_mib_per_unit=128)
    kube_world.mig.refresh_from_db()
    grant(kube_world, kube_world.mig, 1)
    (entry,) = core.read_namespaced_limit_range("gpuportal-defaults", kube_world.llm.slug).spec.limits
    assert entry.default_request == entry.default == entry.max == {"cpu": "50m", "memory": "128Mi"}
    created = core.create_namespaced_pod(kube_world.llm.slug, pod("small"))
    assert created.spec.containers[0].resources.limits == {"cpu": "50m", "memory": "128Mi"}


def test_a_retained_idle_namespace_admits_no_new_container(kube_world: World, core: Any, settings: Any) -> None:
    settings.GPUPORTAL_KUBE_PRUNE_POLICY = "retain-namespace"
    allocation = grant(kube_world, kube_world.mig, 1)
    allocation_services.allocation_release(actor=kube_world.users["nlp_member"], allocation_id=allocation.pk)
    hard = core.read_namespaced_resource_quota("gpuportal-gpu-quota", kube_world.llm.slug).spec.hard
    assert (hard["limits.cpu"], hard["limits.memory"], hard["requests.cpu"]) == ("0", "0", "0")
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(kube_world.llm.slug, pod("after-the-grant"))
    assert refused.value.status == 403 and "gpuportal-gpu-quota" in refused.value.body

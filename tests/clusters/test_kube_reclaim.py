"""Reclaim on the real API server, with the scheduler and fake GPU nodes: the victim's
ResourceQuota is lowered and its pods beyond it are evicted through the Eviction API, lowest
priority first; a PodDisruptionBudget holds a pod back until a later push."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone
from kubernetes import client

from allocations.grants import services
from allocations.grants.reclaims import allocations_reclaim_due
from allocations.grants.scheduling import allocations_start_due
from allocations.models import Allocation, AllocationState, PriorityClass, Quota
from delivery.services import cluster_sync_project
from delivery.tasks import clusters_drift_check_task
from kube_testenv import wait_for
from kube_testenv.gpu_nodes import GPUNodeSpec
from kube_testenv.kubeapi import wait_for_pod_bound
from kube_testenv.workloads import gpu_pod
from tests.clusters.conftest import audit_head, audit_since
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pool(kube_world: World, fake_gpu_nodes: Any) -> Iterator[dict[str, str]]:
    """A fake node with 16 GPUs only this test's pods land on. It stands for the whole world's
    GPUs, so the cluster does not pin pods to the nodes their grants booked (that is
    tests/clusters/test_kube_pinning.py's subject)."""
    kube_world.cluster.pin_bookings = False
    kube_world.cluster.save(update_fields=["pin_bookings"])
    label = {"gpuportal.test/pool": uuid.uuid4().hex[:12]}
    fake_gpu_nodes.add(GPUNodeSpec(f"reclaim-{label['gpuportal.test/pool']}", gpus=16, labels=label))
    yield label


def borrowing_departments(world: World) -> PriorityClass:
    """The organisation may hold 12 GPUs, vision is guaranteed 8 and may borrow up to 12, nlp is
    guaranteed 4: nlp's request for its 4 takes back all 4 that vision borrows (a reclaim takes a
    whole grant only when no part would do). Returns a third class, above standard, so the victim
    runs pods of three priorities."""
    Quota.objects.all().delete()
    Quota.objects.create(department=world.acme, flavor=None, guaranteed=Decimal("0"), limit=Decimal("12"))
    Quota.objects.create(department=world.nlp, flavor=None, guaranteed=Decimal("4"), limit=Decimal("10"))
    Quota.objects.create(department=world.vision, flavor=None, guaranteed=Decimal("8"), limit=Decimal("12"))
    world.preemptible.preemptible = True  # reclaimed without notice
    world.preemptible.save(update_fields=["preemptible"])
    return PriorityClass.objects.create(name="gpu-production", value=5000)


def granted(world: World, persona: str, approver: str, project: str, quantity: int, priority: PriorityClass) -> Allocation:
    start = timezone.now()
    request = services.allocation_request(
        actor=world.users[persona], project=getattr(world, project), flavor=world.a100, quantity=quantity,
        priority_class=priority, starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="experiment",
    )
    return services.allocation_approve(actor=world.users[approver], allocation_id=request.pk)


def run_pods(core: Any, namespace: str, pool: dict[str, str], pods: list[tuple[str, int, str]], **labels: str) -> None:
    """Create the pods (name, GPUs, priority class) in this order, wait until the scheduler bound
    them, and report them Running and Ready as a kubelet would (only then does a disruption
    budget protect them: the Eviction API ignores budgets for pending pods)."""
    for name, gpus, priority_class in pods:
        core.create_namespaced_pod(
            namespace, gpu_pod(name, gpus, node_selector=pool, priority_class=priority_class, labels=labels or None)
        )
    for name, _, _ in pods:
        wait_for_pod_bound(core.api_client, namespace, name)
        core.patch_namespaced_pod_status(name, namespace, {"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"},
        ]}})


def live_pods(core: Any, namespace: str) -> set[str]:
    """The pods still there and not on their way out."""
    return {pod.metadata.name for pod in core.list_namespaced_pod(namespace).items if pod.metadata.deletion_timestamp is None}


def wait_for_pods(core: Any, namespace: str, expected: set[str]) -> set[str]:
    """Evicted pods terminate; the fake node confirms their deletion as a kubelet would."""
    return wait_for(lambda: expected if {p.metadata.name for p in core.list_namespaced_pod(namespace).items} == expected
                    else None, timeout=30, what=f"the pods of {namespace} to be {sorted(expected)}")


def gpu_quota(core: Any, namespace: str, name: str = "gpuportal-gpu-quota") -> str:
    return str(core.read_namespaced_resource_quota(name, namespace).spec.hard["requests.nvidia.com/gpu"])


def test_a_reclaimed_grant_lowers_the_quota_and_evicts_its_pods_lowest_priority_first(
    kube_world: World, core: Any, pool: dict[str, str]
) -> None:
    world = kube_world
    production = borrowing_departments(world)
    granted(world, "vision_member", "vision_admin", "seg", 2, production)
    granted(world, "vision_member", "vision_admin", "seg", 6, world.standard)
    borrowed = granted(world, "vision_member", "vision_admin", "seg", 4, world.preemptible)  # 12: 4 beyond the guarantee
    namespace = world.seg.slug
    assert gpu_quota(core, namespace) == "12"
    # cheap-b first: within a priority the newest goes first (then by name, for pods of the same second).
    run_pods(core, namespace, pool, [("prod", 2, "gpu-production"), ("std-1", 3, "gpu-standard"),
                                     ("std-2", 3, "gpu-standard"), ("cheap-b", 2, "gpu-preemptible"),
                                     ("cheap-a", 2, "gpu-preemptible")])
    head = audit_head()

    request = granted(world, "nlp_member", "nlp_admin", "llm", 4, world.standard)  # within nlp's guarantee

    borrowed.refresh_from_db()
    assert (borrowed.state, borrowed.reclaimed_for_id) == (AllocationState.RECLAIMED, request.pk)
    assert gpu_quota(core, namespace) == "8"
    assert core.read_namespaced_resource_quota("gpuportal-priority-other", namespace).spec.scope_selector \
        .match_expressions[0].values == ["gpu-production", "gpu-standard"]  # preemptible pods: now 0 GPUs
    assert wait_for_pods(core, namespace, {"prod", "std-1", "std-2"})
    events = audit_since(head, "cluster.pods_evicted")
    assert len(events) == 1
    details = events[0].details
    assert (details["namespace"], details["cluster"], details["held_back"]) == (namespace, world.cluster.name, [])
    assert [(pod["pod"], pod["priority"], pod["resource"], pod["amount"]) for pod in details["evicted"]] == [
        ("cheap-a", 100, "nvidia.com/gpu", 2), ("cheap-b", 100, "nvidia.com/gpu", 2),
    ]
    assert details["reclaimed_for"] == [request.pk]
    assert details["allocations"][0]["allocation"] == borrowed.pk and details["allocations"][0]["state"] == "reclaimed"
    assert events[0].department_id == world.vision.pk
    request.refresh_from_db()
    assert request.state == AllocationState.ACTIVE
    assert gpu_quota(core, world.llm.slug) == "4"


def test_a_reclaim_with_notice_evicts_nothing_until_the_notice_ran_out_then_the_newest_pods_beyond_it(
    kube_world: World, core: Any, pool: dict[str, str]
) -> None:
    world = kube_world
    production = borrowing_departments(world)
    granted(world, "vision_member", "vision_admin", "seg", 2, production)
    granted(world, "vision_member", "vision_admin", "seg", 6, world.standard)
    borrowed = granted(world, "vision_member", "vision_admin", "seg", 4, world.standard)  # 15 minutes' notice
    namespace = world.seg.slug
    # Created newest last by name: std-a is the newest (or shares the newest second and sorts first).
    run_pods(core, namespace, pool, [("prod", 2, "gpu-production"), ("std-e", 2, "gpu-standard"),
                                     ("std-d", 2, "gpu-standard"), ("std-c", 2, "gpu-standard"),
                                     ("std-b", 2, "gpu-standard"), ("std-a", 2, "gpu-standard")])
    head = audit_head()

    request = granted(world, "nlp_member", "nlp_admin", "llm", 4, world.standard)

    borrowed.refresh_from_db()
    assert (borrowed.state, request.state) == (AllocationState.RECLAIMING, AllocationState.SCHEDULED)
    assert gpu_quota(core, namespace) == "12"  # the victim keeps running out its notice
    assert live_pods(core, namespace) == {"prod", "std-a", "std-b", "std-c", "std-d", "std-e"}
    assert audit_since(head, "cluster.pods_evicted") == []

    later = timezone.now() + datetime.timedelta(minutes=16)
    assert allocations_reclaim_due(now=later) == 1

    assert (gpu_quota(core, namespace), gpu_quota(core, namespace, "gpuportal-priority-gpu-standard")) == ("8", "6")
    assert wait_for_pods(core, namespace, {"prod", "std-c", "std-d", "std-e"})
    [event] = audit_since(head, "cluster.pods_evicted")
    assert [(pod["pod"], pod["quota"]) for pod in event.details["evicted"]] == [
        ("std-a", "gpuportal-priority-gpu-standard"), ("std-b", "gpuportal-priority-gpu-standard"),
    ]
    assert event.details["reclaimed_for"] == [request.pk]
    assert allocations_start_due(now=later) == 1
    assert gpu_quota(core, world.llm.slug) == "4"


def _budget(core: Any, namespace: str, *, allowed: int) -> None:
    """A PodDisruptionBudget keeping one of the two cheap pods, with the status the disruption
    controller would give it (kube_testenv does not run that controller)."""
    policy = client.PolicyV1Api(core.api_client)
    created = policy.create_namespaced_pod_disruption_budget(namespace, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "cheap"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "cheap"}}},
    })
    policy.patch_namespaced_pod_disruption_budget_status("cheap", namespace, {"status": {
        "observedGeneration": created.metadata.generation, "currentHealthy": 2, "desiredHealthy": 1,
        "expectedPods": 2, "disruptionsAllowed": allowed,
    }})


def test_a_disruption_budget_holds_a_pod_back_until_a_later_push_after_it_is_gone(
    kube_world: World, core: Any, pool: dict[str, str]
) -> None:
    world = kube_world
    borrowing_departments(world)
    granted(world, "vision_member", "vision_admin", "seg", 8, world.standard)
    granted(world, "vision_member", "vision_admin", "seg", 4, world.preemptible)
    namespace = world.seg.slug
    run_pods(core, namespace, pool, [("std", 8, "gpu-standard")])
    run_pods(core, namespace, pool, [("cheap-b", 2, "gpu-preemptible"), ("cheap-a", 2, "gpu-preemptible")], app="cheap")
    _budget(core, namespace, allowed=1)
    head = audit_head()

    request = granted(world, "nlp_member", "nlp_admin", "llm", 4, world.standard)

    assert gpu_quota(core, namespace) == "8"
    assert wait_for_pods(core, namespace, {"std", "cheap-b"})  # the budget allowed one disruption
    [event] = audit_since(head, "cluster.pods_evicted")
    assert [pod["pod"] for pod in event.details["evicted"]] == ["cheap-a"]
    [held] = event.details["held_back"]
    assert held["pod"] == "cheap-b" and held["reason"].startswith("HTTP 429") and "disruption budget" in held["reason"]
    assert event.details["reclaimed_for"] == [request.pk]

    # A push while the budget still forbids it says so, and fails nothing.
    again = cluster_sync_project(cluster_id=world.cluster.pk, project_id=world.seg.pk)
    assert (again.evicted, [pod.name for pod in again.held_back]) == ((), ["cheap-b"])
    # The periodic repair finds the same budget in the way: no event for it each time.
    head = audit_head()
    clusters_drift_check_task()
    assert audit_since(head, "cluster.pods_evicted") == []
    assert live_pods(core, namespace) == {"std", "cheap-b"}

    client.PolicyV1Api(core.api_client).delete_namespaced_pod_disruption_budget("cheap", namespace)
    clusters_drift_check_task()

    assert wait_for_pods(core, namespace, {"std"})
    [event] = audit_since(head, "cluster.pods_evicted")
    assert ([pod["pod"] for pod in event.details["evicted"]], event.details["held_back"]) == (["cheap-b"], [])

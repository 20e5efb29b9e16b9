"""Quota windows on the real API server, with the scheduler and fake GPU nodes: a raise lets in a
request the quota refused, and its pod runs; a shrink with policy ``wait`` keeps the running pods,
refuses new requests above the new value, and the namespace's ResourceQuota refuses a pod beyond
it; once the window is over, the effective quota and the cluster's objects are the base again,
exactly."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone
from kubernetes import client

from allocations.grants.services import allocations_expire
from allocations.models import AllocationState, Quota
from allocations.quotas import windows
from allocations.quotas.window_reading import approved_window_specs
from allocations.windows.tick import quota_windows_tick
from delivery.rendering import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from kernel.errors import QuotaExceeded
from tests.clusters.test_kube_reclaim import gpu_quota, live_pods, pool, run_pods, wait_for_pods
from tests.conftest import World
from tests.quotas.windowing import DAY, HOUR, approve, ask, quota, window

pytestmark = pytest.mark.django_db(transaction=True)

__all__ = ["pool"]  # the fixture: a fake node with 16 GPUs only this test's pods land on

MINUTE = datetime.timedelta(minutes=1)


def nlp_limit(world: World, limit: str) -> Quota:
    found = quota(world, "nlp")
    found.limit = Decimal(limit)
    found.save(update_fields=["limit"])
    return found


def cluster_objects(core: Any, namespace: str) -> dict[str, Any]:
    """What the portal keeps on the cluster for the namespace and cluster-wide, as the API server
    holds it (server-set metadata left out)."""
    quotas = {
        item.metadata.name: (item.spec.hard, item.spec.scope_selector.to_dict() if item.spec.scope_selector else None)
        for item in core.list_namespaced_resource_quota(namespace).items
    }
    classes = {
        item.metadata.name: (item.value, item.preemption_policy, item.description)
        for item in client.SchedulingV1Api(core.api_client).list_priority_class(
            label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}").items
    }
    return {"quotas": quotas, "priority_classes": classes}


def effective_now(target: Quota, at: datetime.datetime) -> tuple[Decimal, Decimal]:
    found = windows.effective(guaranteed=target.guaranteed, limit=target.limit,
                              windows=approved_window_specs(quota_ids=[target.pk]).get(target.pk, []), at=at)
    return found.guaranteed, found.limit


def test_a_raise_admits_what_the_quota_refused_its_pod_runs_and_the_end_restores_the_base(
    kube_world: World, core: Any, pool: dict[str, str]
) -> None:
    world = kube_world
    base = nlp_limit(world, "4")
    approve(world, ask(world, quantity=2))
    namespace = world.llm.slug
    before = cluster_objects(core, namespace)
    assert gpu_quota(core, namespace) == "2"
    festival_request = ask(world, quantity=6, length=HOUR)
    with pytest.raises(QuotaExceeded):
        approve(world, festival_request)

    now = timezone.now()
    window(world, base, begins_at=now - MINUTE, ends_at=now + 2 * HOUR, limit_delta="4")
    [begins] = quota_windows_tick(now=now).applied
    assert (begins.before["limit"], begins.after["limit"], begins.pushes) == ("4", "8", 1)

    assert approve(world, festival_request).state == AllocationState.APPROVED
    assert gpu_quota(core, namespace) == "8"
    run_pods(core, namespace, pool, [("festival", 6, "gpu-standard")])  # admitted and bound
    assert live_pods(core, namespace) == {"festival"}

    later = now + 2 * HOUR + MINUTE
    [ends] = quota_windows_tick(now=later).applied
    assert (ends.kind, ends.before["limit"], ends.after["limit"], ends.reclaimed) == ("end", "8", "4", ())
    assert allocations_expire(now=later) == 1  # the festival's grant ended with it
    wait_for_pods(core, namespace, set())  # evicted: the namespace may hold 2 again
    assert effective_now(base, later) == (Decimal(0), Decimal(4))
    assert cluster_objects(core, namespace) == before


def test_a_shrink_that_waits_keeps_the_running_pods_refuses_more_and_its_end_restores_the_base(
    kube_world: World, core: Any, pool: dict[str, str]
) -> None:
    world = kube_world
    base = quota(world, "nlp")  # 10 GPU-equivalents
    approve(world, ask(world, quantity=6, length=DAY))
    namespace = world.llm.slug
    run_pods(core, namespace, pool, [("train-a", 3, "gpu-standard"), ("train-b", 3, "gpu-standard")])
    before = cluster_objects(core, namespace)

    now = timezone.now()
    window(world, base, begins_at=now - MINUTE, ends_at=now + 2 * HOUR, limit="2")
    [shrinks] = quota_windows_tick(now=now).applied
    assert (shrinks.before["limit"], shrinks.after["limit"], shrinks.reclaimed) == ("10", "2", ())

    assert live_pods(core, namespace) == {"train-a", "train-b"}  # they run to their grant's end
    assert gpu_quota(core, namespace) == "6"
    with pytest.raises(QuotaExceeded) as refusal:
        approve(world, ask(world, quantity=1, length=HOUR))
    assert (refusal.value.details["limit"], refusal.value.details["in_use"]) == ("2", "6")
    with pytest.raises(client.ApiException) as forbidden:
        run_pods(core, namespace, pool, [("one-more", 1, "gpu-standard")])
    assert forbidden.value.status == 403 and "exceeded quota" in str(forbidden.value.body)

    later = now + 2 * HOUR + MINUTE
    [ends] = quota_windows_tick(now=later).applied
    assert (ends.before["limit"], ends.after["limit"]) == ("2", "10")
    assert effective_now(base, later) == (base.guaranteed, base.limit)
    assert live_pods(core, namespace) == {"train-a", "train-b"}
    assert cluster_objects(core, namespace) == before

"""The push outbox: written with the change, delivered once, retried with capped backoff, coalesced."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.utils import timezone

from allocations.grants import services as allocation_services
from allocations.models import Allocation, AllocationState
from clusters.models import ClusterPush, PushState
from clusters.outbox import pushes_due
from delivery.outbox import push_backoff_seconds, push_deliver
from tests.conftest import World

pytestmark = pytest.mark.django_db


def approve(world: World, *, quantity: int = 1) -> Allocation:
    start = timezone.now()
    allocation = allocation_services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="x",
    )
    return allocation_services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)


def test_approval_writes_the_push_rows_in_its_own_transaction(world: World) -> None:
    allocation = approve(world)  # no commit in this test: nothing was dispatched
    rows = list(ClusterPush.objects.order_by("pk").values_list("project_id", "allocation_id", "state"))
    assert rows == [(world.llm.pk, allocation.pk, PushState.PENDING), (None, None, PushState.PENDING)]
    assert len(pushes_due()) == 2


def test_backoff_doubles_from_the_base_and_stops_at_the_cap(settings: Any) -> None:
    settings.GPUPORTAL_PUSH_BACKOFF_BASE_SECONDS = 2
    settings.GPUPORTAL_PUSH_BACKOFF_MAX_SECONDS = 60
    assert [push_backoff_seconds(attempt, jitter=0) for attempt in range(1, 8)] == [2, 4, 8, 16, 32, 60, 60]
    assert 1.6 <= push_backoff_seconds(1) <= 2.4


def test_a_failing_push_is_retried_later_and_fails_its_allocation_after_the_last_attempt(
    world: World, settings: Any, tmp_path: Path
) -> None:
    settings.GPUPORTAL_PUSH_MAX_ATTEMPTS = 3
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    settings.GPUPORTAL_MANIFESTS_DIR = blocker
    allocation = approve(world)
    push = ClusterPush.objects.get(allocation=allocation)

    assert push_deliver(push_id=push.pk) is not None
    push.refresh_from_db()
    assert (push.state, push.attempts) == (PushState.PENDING, 1) and push.available_at > timezone.now()
    assert push_deliver(push_id=push.pk) is None  # not due yet: nothing happens
    push.refresh_from_db()
    assert push.attempts == 1
    assert push_deliver(push_id=push.pk, ignore_schedule=True) is not None
    assert push_deliver(push_id=push.pk, ignore_schedule=True) is None

    push.refresh_from_db()
    allocation.refresh_from_db()
    assert (push.state, push.attempts) == (PushState.FAILED, 3)
    assert allocation.state == AllocationState.FAILED and "cannot write manifests" in allocation.failure_reason


def test_one_push_completes_the_older_pending_pushes_of_the_same_project(world: World) -> None:
    first = approve(world)
    second = approve(world, quantity=2)
    pushes = ClusterPush.objects.filter(project=world.llm).order_by("pk")
    assert pushes.count() == 2

    assert push_deliver(push_id=pushes.last().pk) is None  # type: ignore[union-attr]

    assert set(pushes.values_list("state", flat=True)) == {PushState.DONE}
    states = dict(Allocation.objects.filter(pk__in=[first.pk, second.pk]).values_list("pk", "state"))
    assert states == {first.pk: AllocationState.ACTIVE, second.pk: AllocationState.ACTIVE}


def test_a_claimed_push_is_left_to_its_worker_until_the_lease_runs_out(world: World) -> None:
    approve(world)
    push = ClusterPush.objects.filter(project=world.llm).get()
    push.claimed_until = timezone.now() + datetime.timedelta(minutes=5)
    push.attempts = 1
    push.save()
    assert push.pk not in pushes_due()
    assert push.pk in pushes_due(now=timezone.now() + datetime.timedelta(minutes=6))


def test_the_manifests_driver_writes_the_cluster_wide_objects_in_their_own_folder(world: World, settings: Any) -> None:
    booked = approve(world).reservations.get()
    push = ClusterPush.objects.get(project__isnull=True)
    assert push_deliver(push_id=push.pk) is None
    folder = Path(settings.GPUPORTAL_MANIFESTS_DIR) / world.cluster.name / "cluster"
    names = sorted(path.name for path in folder.iterdir())
    assert "priorityclass-gpu-standard.yaml" in names
    assert "configmap-gpu-operator.gpuportal-device-plugin-configs.yaml" in names
    assert {"node-a100-0.yaml", "node-a100-1.yaml", "node-h100-0.yaml"} <= set(names)
    node = yaml.safe_load((folder / f"node-{booked.node.name}.yaml").read_text())
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/device-plugin.config"] == "mig-mixed"  # the A100 nodes run the mixed strategy
    config_map = yaml.safe_load((folder / "configmap-gpu-operator.gpuportal-mig-parted-config.yaml").read_text())
    layouts = yaml.safe_load(config_map["data"]["config.yaml"])["mig-configs"]
    # The whole GPU the engine booked has MIG off; the others stay in MIG mode, empty.
    assert {"devices": booked.gpu_indices, "mig-enabled": False} in layouts[labels["nvidia.com/mig.config"]]
    h100 = yaml.safe_load((folder / "node-h100-0.yaml").read_text())["metadata"]["labels"]
    assert h100 == {"nvidia.com/device-plugin.config": "exclusive"}

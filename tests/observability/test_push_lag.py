"""gpuportal_push_lag_seconds: one observation per change a push carried, from its outbox row to
the push's success, by cluster and scope; served at /metrics."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from allocations.grants import services as allocation_services
from clusters.models import ClusterPush
from delivery.metrics import PUSH_LAG
from delivery.outbox import push_deliver
from kernel.clock import clock_advance, clock_reset
from tests.conftest import World
from tests.observability.test_metrics import scrape

pytestmark = pytest.mark.django_db


def lag(cluster: str, scope: str) -> tuple[float, float, float]:
    """(observations, their sum, observations within 5 s) so far in this process."""
    [family] = PUSH_LAG.labels(cluster=cluster, scope=scope).collect()
    samples = {s.name: s.value for s in family.samples
               if s.name != "gpuportal_push_lag_seconds_bucket" or s.labels["le"] == "5.0"}
    return samples["gpuportal_push_lag_seconds_count"], samples["gpuportal_push_lag_seconds_sum"], samples["gpuportal_push_lag_seconds_bucket"]


def test_each_change_a_push_carried_is_observed_once_from_its_row_to_the_push(
    world: World, django_capture_on_commit_callbacks: Any
) -> None:
    start = timezone.now()
    for quantity in (1, 2):  # two approvals: two project rows and two cluster-wide rows, all pending
        allocation = allocation_services.allocation_request(
            actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=quantity,
            priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="x",
        )
        allocation_services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    before = {scope: lag("test-cluster", scope) for scope in ("project", "cluster-wide")}
    clock_advance(datetime.timedelta(seconds=7))
    try:
        with django_capture_on_commit_callbacks(execute=True):
            for push in ClusterPush.objects.order_by("-pk")[:2]:  # the newest of each scope covers the older one
                push_deliver(push_id=push.pk)
    finally:
        clock_reset()

    for scope in ("project", "cluster-wide"):
        count, total, within_5s = lag("test-cluster", scope)
        assert count - before[scope][0] == 2  # both changes, though one push carried them
        assert 14 <= total - before[scope][1] < 20  # each waited the 7 s the clock moved, and a little more
        assert within_5s == before[scope][2]
    families = scrape(Client(REMOTE_ADDR="127.0.0.1"))
    assert any(labels.get("scope") == "cluster-wide" and labels.get("cluster") == "test-cluster"
               for _, labels, _ in families["gpuportal_push_lag_seconds"])

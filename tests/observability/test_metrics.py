"""GET /metrics: who may scrape it, and that the scrape-time families say what the database says."""

from __future__ import annotations

import datetime
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from accounting.idle_models import IdleAction, IdleCase, IdlePolicy, IdleState
from allocations.models import Allocation, AllocationState
from audit.services import audit_record
from clusters.models import Cluster, ClusterPush, Node, PushState
from telemetry.models import AllocationUsage, NodeReportState, UsageSource
from tests.conftest import World

DOCS = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def scrape(client: Client, **extra: Any) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    response = client.get("/metrics", **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        samples[family.name] = [(s.name, s.labels, s.value) for s in family.samples]
    return samples


def value(samples: dict[str, list[tuple[str, dict[str, str], float]]], family: str, **labels: str) -> float:
    found = [v for _, have, v in samples[family] if all(have.get(k) == w for k, w in labels.items())]
    assert len(found) == 1, (family, labels, samples[family])
    return found[0]


def allocation(world: World, *, state: str, created: datetime.datetime | None = None, quantity: int = 1) -> Allocation:
    now = timezone.now()
    row = Allocation.objects.create(
        project=world.llm, flavor=world.a100, quantity=quantity, priority_class=world.standard, cluster=world.cluster,
        starts_at=now, ends_at=now + datetime.timedelta(days=1), justification="test", state=state,
        requested_by=world.users["nlp_member"],
    )
    if created is not None:
        Allocation.objects.filter(pk=row.pk).update(created_at=created)
    return row


def test_without_a_token_only_loopback_may_scrape(world: World, settings: Any) -> None:
    settings.GPUPORTAL_METRICS_TOKEN = None
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="::1").get("/metrics").status_code == 200
    refused = Client(REMOTE_ADDR="10.0.0.5").get("/metrics")
    assert refused.status_code == 403
    assert b"GPUPORTAL_METRICS_TOKEN" in refused.content
    # A forwarded header does not make a remote client local.
    assert Client(REMOTE_ADDR="10.0.0.5").get("/metrics", HTTP_X_FORWARDED_FOR="127.0.0.1").status_code == 403


def test_with_a_token_the_bearer_token_is_required_from_everywhere(world: World, settings: Any) -> None:
    settings.GPUPORTAL_METRICS_TOKEN = "s3cret-metrics-token"
    local = Client(REMOTE_ADDR="127.0.0.1")
    missing = local.get("/metrics")
    assert missing.status_code == 401
    assert missing["WWW-Authenticate"].startswith("Bearer")
    assert local.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert local.get("/metrics", HTTP_AUTHORIZATION="Basic czNjcmV0").status_code == 401
    remote = Client(REMOTE_ADDR="10.0.0.5")
    answered = remote.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-metrics-token")
    assert answered.status_code == 200
    assert answered["Cache-Control"] == "no-store"


def test_metrics_accept_only_get(world: World) -> None:
    assert Client(REMOTE_ADDR="127.0.0.1").post("/metrics").status_code == 405


def test_quota_families_give_limits_effective_limits_and_use(world: World) -> None:
    allocation(world, state=AllocationState.ACTIVE, quantity=3)
    allocation(world, state=AllocationState.PENDING, quantity=5)  # pending holds nothing
    samples = scrape(Client(REMOTE_ADDR="127.0.0.1"))
    labels = {"department": "nlp", "flavor": "a100", "sharing_mode": "exclusive"}
    assert value(samples, "gpuportal_quota_limit_units", **labels) == 8
    assert value(samples, "gpuportal_quota_effective_limit_units", **labels) == 8
    assert value(samples, "gpuportal_quota_used_units", **labels) == 3
    assert value(samples, "gpuportal_quota_guaranteed_units", **labels) == 0
    # The GPU-equivalent totals cover the subtree: acme's counts nlp's allocation.
    assert value(samples, "gpuportal_quota_limit_gpu_equivalents", department="acme") == 16
    assert value(samples, "gpuportal_quota_used_gpu_equivalents", department="acme") == 3
    assert value(samples, "gpuportal_quota_used_gpu_equivalents", department="vision") == 0


def test_allocations_by_state_and_the_oldest_pending_age(world: World) -> None:
    now = timezone.now()
    allocation(world, state=AllocationState.PENDING, created=now - datetime.timedelta(hours=5))
    allocation(world, state=AllocationState.PENDING, created=now - datetime.timedelta(minutes=5))
    allocation(world, state=AllocationState.ACTIVE)
    samples = scrape(Client(REMOTE_ADDR="127.0.0.1"))
    assert value(samples, "gpuportal_allocations", department="nlp", state="pending") == 2
    assert value(samples, "gpuportal_allocations", department="nlp", state="active") == 1
    age = value(samples, "gpuportal_allocation_oldest_pending_age_seconds", department="nlp")
    assert 5 * 3600 - 5 <= age <= 5 * 3600 + 60
    assert not [s for s in samples["gpuportal_allocation_oldest_pending_age_seconds"] if s[1]["department"] == "vision"]


def test_cluster_families_count_queue_failures_and_last_sync(world: World) -> None:
    now = timezone.now()
    ClusterPush.objects.create(cluster=world.cluster, available_at=now)
    ClusterPush.objects.create(cluster=world.cluster, available_at=now, state=PushState.DONE, completed_at=now)
    Cluster.objects.filter(pk=world.cluster.pk).update(push_failures=4)
    samples = scrape(Client(REMOTE_ADDR="127.0.0.1"))
    assert value(samples, "gpuportal_cluster_push_queue_depth", cluster="test-cluster") == 1
    assert value(samples, "gpuportal_cluster_push_failures", cluster="test-cluster") == 4
    assert value(samples, "gpuportal_cluster_drift_repairs", cluster="test-cluster") == 0
    synced = value(samples, "gpuportal_cluster_last_successful_sync_timestamp_seconds", cluster="test-cluster")
    assert abs(synced - now.timestamp()) < 1


def test_node_staleness_and_the_audit_chain(world: World) -> None:
    now = timezone.now()
    fresh, silent = Node.objects.filter(cluster=world.cluster).order_by("name")[:2]
    NodeReportState.objects.create(node=fresh, received_at=now, stale_at=now + datetime.timedelta(minutes=2))
    NodeReportState.objects.create(node=silent, received_at=now - datetime.timedelta(hours=1),
                                   stale_at=now - datetime.timedelta(minutes=58))  # fmt: skip
    audit_record(actor=None, action=__import__("audit").actions.CLUSTER_PUSHED, target=world.cluster, details={})
    samples = scrape(Client(REMOTE_ADDR="127.0.0.1"))
    assert value(samples, "gpuportal_node_report_stale", cluster="test-cluster", node=fresh.name) == 0
    assert value(samples, "gpuportal_node_report_stale", cluster="test-cluster", node=silent.name) == 1
    assert value(samples, "gpuportal_audit_chain_head_sequence") >= 1


def test_usage_families_prefer_measured_sources_and_leave_unknown_out(world: World) -> None:
    now = timezone.now()
    bucket = now.replace(second=0, microsecond=0) - datetime.timedelta(minutes=5)
    busy = allocation(world, state=AllocationState.ACTIVE, quantity=2)
    unknown = allocation(world, state=AllocationState.ACTIVE)
    common = {"cluster": world.cluster, "department": world.nlp, "bucket_start": bucket}
    AllocationUsage.objects.create(allocation=busy, source=UsageSource.AGENT, coverage=1, activity=0.1,
                                   granted_gpu_eq=2, used_gpu_eq=0.2, devices=2, **common)  # fmt: skip
    AllocationUsage.objects.create(allocation=busy, source=UsageSource.DCGM, coverage=1, activity=0.75,
                                   granted_gpu_eq=2, used_gpu_eq=1.5, devices=2, **common)  # fmt: skip
    AllocationUsage.objects.create(allocation=unknown, source=UsageSource.DCGM, coverage=0.2, activity=None,
                                   granted_gpu_eq=1, used_gpu_eq=None, devices=1, **common)  # fmt: skip
    samples = scrape(Client(REMOTE_ADDR="127.0.0.1"))
    assert value(samples, "gpuportal_allocation_gpu_activity_ratio", allocation=str(busy.pk)) == 0.75
    assert not [s for s in samples["gpuportal_allocation_gpu_activity_ratio"] if s[1]["allocation"] == str(unknown.pk)]
    assert value(samples, "gpuportal_department_granted_gpu_equivalents", department="nlp") == 3
    assert value(samples, "gpuportal_department_used_gpu_equivalents", department="nlp") == 1.5


def test_idle_families_count_open_cases_and_those_waiting_for_data(world: World) -> None:
    now = timezone.now()
    policy = IdlePolicy.objects.create(name="metrics", action=IdleAction.RECLAIM)
    due = {"opened_at": now, "idle_since": now - datetime.timedelta(hours=3), "last_evaluated_at": now,
           "warned_at": now - datetime.timedelta(hours=2), "action_due_at": now - datetime.timedelta(hours=1)}
    for state in (IdleState.WARNED, IdleState.OBSERVING, IdleState.KEPT):
        IdleCase.objects.create(allocation=allocation(world, state=AllocationState.ACTIVE), policy=policy, state=state, **due)
    samples = scrape(Client(REMOTE_ADDR="127.0.0.1"))
    assert value(samples, "gpuportal_idle_cases", department="nlp", state="warned") == 1
    assert value(samples, "gpuportal_idle_cases", department="nlp", state="observing") == 1
    assert not [s for s in samples["gpuportal_idle_cases"] if s[1]["state"] == "kept"]
    assert value(samples, "gpuportal_idle_cases_waiting_for_data", department="nlp") == 1


def test_http_requests_are_counted_by_route_not_path(world: World) -> None:
    client = Client(REMOTE_ADDR="127.0.0.1")
    client.get("/api/v1/allocations/999999/")
    samples = scrape(client)
    routes = {labels["route"] for _, labels, _ in samples["gpuportal_http_requests"]}
    assert "api/v1/allocations/<int:allocation_id>/" in routes or any("<int:" in route for route in routes)
    assert not any("999999" in route for route in routes)
    assert "metrics" not in routes


def test_every_family_is_documented_and_every_documented_family_is_exposed(world: World) -> None:
    bucket = timezone.now().replace(second=0, microsecond=0) - datetime.timedelta(minutes=5)
    busy = allocation(world, state=AllocationState.ACTIVE)
    allocation(world, state=AllocationState.PENDING)
    AllocationUsage.objects.create(allocation=busy, source=UsageSource.DCGM, coverage=1, activity=0.5, granted_gpu_eq=1,
                                   used_gpu_eq=0.5, devices=1, cluster=world.cluster, department=world.nlp,
                                   bucket_start=bucket)  # fmt: skip
    from celery import signals

    signals.task_success.send(sender=type("T", (), {"name": "demo.task"})())
    Client().get("/")
    documented = set(re.findall(r"^\| `(gpuportal_[a-z_]+)` \|", DOCS.read_text(), flags=re.MULTILINE))
    response = Client(REMOTE_ADDR="127.0.0.1").get("/metrics")
    exposed = {
        family.name + ("_total" if family.type == "counter" else "")
        for family in text_string_to_metric_families(response.content.decode())
    }
    assert exposed == documented


@pytest.mark.django_db
def test_a_scrape_costs_the_same_queries_however_many_rows(world: World, django_assert_max_num_queries: Any) -> None:
    for _ in range(30):
        allocation(world, state=AllocationState.PENDING)
    for index in range(20):
        Cluster.objects.create(name=f"c{index}")
    client = Client(REMOTE_ADDR="127.0.0.1")
    with django_assert_max_num_queries(20):
        scrape(client)


def test_quota_numbers_are_plain_floats(world: World) -> None:
    assert float(Decimal("0.1429")) == pytest.approx(0.1429)

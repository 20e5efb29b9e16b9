"""GET /api/v1/allocations/{id}/pods/ over HTTP: who sees it, what a manifests cluster answers, an
unreachable cluster, and the counts behind gpuportal_pending_pods."""

from __future__ import annotations

import datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from allocations.models import Allocation
from clusters.models import PendingPodsRead
from delivery import pending_pods
from delivery.drivers.base import DriverError
from delivery.pod_reasons import PendingRead, PendingWorkload, PodEvent
from observability.collectors import pending_pod_families
from tests.conftest import World
from tests.pods import records as r
from tests.why.test_reasons import ask, grant

pytestmark = pytest.mark.django_db

WAITING = PendingRead(workloads=(
    PendingWorkload(kind="Job", name="train", namespace="llm", since=r.OLD,
                    events=(PodEvent(reason="FailedCreate", message=r.TOO_BIG_REFUSAL),)),
    PendingWorkload(kind="Pod", name="pinned", namespace="llm", since=r.OLD, requests={"nvidia.com/gpu": 1},
                    node_selector={"pool": "busy"}, scheduled_reason="Unschedulable", scheduled_message=r.PINNED_AWAY),
))  # fmt: skip


class FakeDriver:
    def __init__(self, answer: PendingRead | Exception) -> None:
        self.answer = answer
        self.asked: list[tuple[str, datetime.timedelta]] = []

    def read_pending(self, *, namespace: str, older_than: datetime.timedelta) -> PendingRead:
        self.asked.append((namespace, older_than))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def close(self) -> None:
        return None


def _granted(world: World) -> Allocation:
    return grant(world, ask(world, flavor=world.a100, quantity=1), "nlp_admin")


def _use(monkeypatch: pytest.MonkeyPatch, driver: FakeDriver) -> None:
    monkeypatch.setattr(pending_pods, "driver_for", lambda cluster: driver)


def test_a_member_sees_her_allocations_pending_pods_explained_and_outsiders_get_404(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    allocation = _granted(world)
    driver = FakeDriver(WAITING)
    _use(monkeypatch, driver)
    answer = world.client("nlp_member").get(f"/api/v1/allocations/{allocation.pk}/pods/")
    assert answer.status_code == 200, answer.content
    data = answer.json()
    assert (data["status"], data["namespace"], data["granted"]) == ("read", world.llm.slug, {"nvidia.com/gpu": 1})
    assert [(pod["name"], pod["code"]) for pod in data["pods"]] == [
        ("train", "pod-asks-more-than-granted"), ("pinned", "pod-unschedulable-node-constraint")]
    assert "the grant is 1" in data["pods"][0]["text"] and data["pods"][0]["fix"]
    assert driver.asked == [(world.llm.slug, datetime.timedelta(seconds=60))]  # the threshold setting
    for persona, status in (("nlp_admin", 200), ("auditor", 200), ("platform", 200), ("vision_member", 404),
                            ("vision_admin", 404)):
        assert world.client(persona).get(f"/api/v1/allocations/{allocation.pk}/pods/").status_code == status, persona
    assert world.client(None).get(f"/api/v1/allocations/{allocation.pk}/pods/").status_code == 401


def test_the_last_read_is_what_the_metric_counts(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    allocation = _granted(world)
    _use(monkeypatch, FakeDriver(WAITING))
    world.client("nlp_member").get(f"/api/v1/allocations/{allocation.pk}/pods/")
    [family] = pending_pod_families()
    counts = {sample.labels["reason"]: sample.value for sample in family.samples}
    assert counts["pod-asks-more-than-granted"] == 1 and counts["pod-unschedulable-node-constraint"] == 1
    assert counts["pod-pending-unknown"] == 0 and len(counts) == 7
    _use(monkeypatch, FakeDriver(PendingRead(workloads=())))
    world.client("nlp_member").get(f"/api/v1/allocations/{allocation.pk}/pods/")
    assert PendingPodsRead.objects.get().counts == {}  # replaced, not added to
    assert {sample.value for sample in next(iter(pending_pod_families())).samples} == {0}


def test_a_manifests_cluster_is_not_readable_and_an_unreachable_one_says_so(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    allocation = _granted(world)
    data = world.client("nlp_member").get(f"/api/v1/allocations/{allocation.pk}/pods/").json()
    assert data["status"] == "not-readable" and "not readable on this driver" in data["message"]
    _use(monkeypatch, FakeDriver(DriverError("cluster test: connection refused")))
    data = world.client("nlp_member").get(f"/api/v1/allocations/{allocation.pk}/pods/").json()
    assert (data["status"], data["message"], data["pods"]) == ("unreachable", "cluster test: connection refused", [])
    assert not PendingPodsRead.objects.exists()


def test_a_request_not_on_a_cluster_has_no_pods_to_read(world: World) -> None:
    request = ask(world, flavor=world.a100, quantity=1)
    data = world.client("nlp_member").get(f"/api/v1/allocations/{request.pk}/pods/").json()
    assert data["status"] == "not-on-cluster" and data["pods"] == []


def _queries(world: World, allocation: Allocation) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert world.client("nlp_member").get(f"/api/v1/allocations/{allocation.pk}/pods/").status_code == 200
    return len(captured.captured_queries)


def test_the_query_count_does_not_grow_with_the_projects_grants(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    _use(monkeypatch, FakeDriver(WAITING))
    allocation = _granted(world)
    _queries(world, allocation)  # the first read creates the namespace's row of counts; later ones update it
    few = _queries(world, allocation)
    for _ in range(6):
        _granted(world)
    assert _queries(world, allocation) == few



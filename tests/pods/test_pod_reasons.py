"""Each pod reason code from recorded pod and event JSON, through the driver's read
(``delivery.drivers.kube_pending``) and the pure mapper (``delivery.pod_reasons``)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

import pytest

from delivery.drivers.base import DriverError
from delivery.drivers.kube_pending import pending_read
from delivery.pod_reasons import PendingRead, PodExplanation, PodReasonCode, mig_pending_nodes, pod_explain
from tests.pods import records as r

NOW = datetime.datetime(2026, 12, 5, 11, 0, tzinfo=datetime.UTC)
GRANTED = {"nvidia.com/gpu": 1}


class FakeRest:
    """The namespace's pods and events as the API server lists them; counts the lists."""

    cluster = "test"

    def __init__(self, pods: list[dict[str, Any]], events: list[dict[str, Any]]) -> None:
        self.pods, self.events = pods, events
        self.paths: list[tuple[str, Any]] = []

    def request(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        raise AssertionError("only checked reads")

    def checked(self, method: str, path: str, *, what: str, allow: Iterable[int] = (), **kwargs: Any) -> tuple[int, Any]:
        assert method == "GET" and path.startswith(f"/api/v1/namespaces/{r.NS}/"), path  # never across the cluster
        self.paths.append((path, kwargs.get("query")))
        items = self.pods if path.endswith("/pods") else self.events
        return 200, {"items": items, "metadata": {}}

    def failure(self, status: int, payload: Any, *, what: str) -> DriverError:
        return DriverError(what)


def explain(pods: list[dict[str, Any]], events: list[dict[str, Any]], *, granted: dict[str, int] = GRANTED,
            nodes: list[dict[str, Any]] = ()) -> list[PodExplanation]:  # type: ignore[assignment]
    read = pending_read(FakeRest(pods, events), namespace=r.NS, older_than=datetime.timedelta(seconds=60), now=NOW)
    mig = mig_pending_nodes(list(nodes))
    return [pod_explain(workload, granted=granted, mig_pending=mig) for workload in read.workloads]


def test_a_job_refused_by_the_namespace_quota_names_the_quota_and_its_numbers() -> None:
    [answer] = explain([], [r.event("Job", "train", "FailedCreate", r.QUOTA_REFUSAL)])
    assert (answer.kind, answer.name, answer.code) == ("Job", "train", PodReasonCode.OVER_NAMESPACE_QUOTA)
    assert answer.facts == {"quota": "gpuportal-gpu-quota", "resource": "nvidia.com/gpu", "requested": "1", "used": "1",
                            "hard": "1", "in_the_way": "ResourceQuota gpuportal-gpu-quota"}
    assert "ask for a resize" in answer.fix


def test_a_pod_asking_more_than_the_grant_says_both_numbers() -> None:
    [answer] = explain([], [r.event("Job", "big", "FailedCreate", r.TOO_BIG_REFUSAL)])
    assert answer.code == PodReasonCode.ASKS_MORE_THAN_GRANTED
    assert "asks 2 nvidia.com/gpu per pod but the grant is 1" in answer.text
    assert answer.facts["asked"] == 2 and answer.facts["granted"] == 1


def test_the_limit_range_maximum_is_asking_more_than_granted_too() -> None:
    [answer] = explain([], [r.event("ReplicaSet", "wide-5d8", "FailedCreate", r.LIMIT_RANGE_REFUSAL)])
    assert answer.code == PodReasonCode.ASKS_MORE_THAN_GRANTED
    assert answer.facts == {"resource": "nvidia.com/gpu", "asked": 2, "granted": 1, "in_the_way": "the namespace's LimitRange"}


def test_a_pod_that_exists_and_asks_more_than_the_grants_give_is_compared_with_the_portals_data() -> None:
    [answer] = explain([r.pod("p", gpus=2, message=r.NO_ROOM)], [], granted={"nvidia.com/gpu": 1})
    assert answer.code == PodReasonCode.ASKS_MORE_THAN_GRANTED and answer.facts["in_the_way"] == "the portal's grants"


def test_a_pod_pinned_away_from_the_free_gpus_names_its_selector() -> None:
    pending = r.pod("pinned", selector={"pool": "busy"}, message=r.PINNED_AWAY)
    [answer] = explain([pending], [r.event("Pod", "pinned", "FailedScheduling", r.PINNED_AWAY)], granted={"nvidia.com/gpu": 4})
    assert answer.code == PodReasonCode.NODE_CONSTRAINT
    assert answer.facts["in_the_way"] == "the pod's nodeSelector pool=busy"
    assert answer.facts["insufficient"] == {"nvidia.com/gpu": 1} and answer.facts["selector_mismatch"] == 4


def test_the_bookings_pin_is_named_as_the_portals_object() -> None:
    pending = r.pod("p", selector={"pool.gpuportal.io/nlp-bert": "booked"}, message=r.PINNED_AWAY)
    [answer] = explain([pending], [])
    assert answer.code == PodReasonCode.NODE_CONSTRAINT
    assert answer.facts["in_the_way"] == "the booking's pin (nodeSelector pool.gpuportal.io/nlp-bert=booked)"


def test_the_portals_taint_is_named() -> None:
    [answer] = explain([r.pod("p", message=r.TAINTED)], [])
    assert answer.code == PodReasonCode.NODE_CONSTRAINT
    assert answer.facts["in_the_way"] == "the portal's taint gpuportal.io/mps-tenant: vision"


def test_no_room_anywhere() -> None:
    [answer] = explain([r.pod("p", message=r.NO_ROOM)], [])
    assert answer.code == PodReasonCode.NO_ROOM and answer.facts["insufficient"] == {"nvidia.com/gpu": 2}


def test_a_mig_pod_waits_for_the_repartition_of_a_node_labelled_pending() -> None:
    mig = r.pod("m", resource="nvidia.com/mig-1g.10gb", message=r.MIG_WAIT)
    [answer] = explain([mig], [], granted={"nvidia.com/mig-1g.10gb": 2}, nodes=[r.mig_node("pending")])
    assert answer.code == PodReasonCode.MIG_RECONFIGURATION and answer.facts["nodes"] == ["a100-0"]
    [settled] = explain([mig], [], granted={"nvidia.com/mig-1g.10gb": 2}, nodes=[r.mig_node("success")])
    assert settled.code == PodReasonCode.NO_ROOM


def test_an_admission_policy_denial() -> None:
    [answer] = explain([], [r.event("Job", "j", "FailedCreate", r.POLICY_REFUSAL)])
    assert answer.code == PodReasonCode.ADMISSION_DENIED and "booked nodes: a100-0" in answer.text


def test_a_binding_the_bookings_policy_refuses_is_an_admission_denial() -> None:
    refused = ('running Bind plugin "DefaultBinder": pods "p" is forbidden: ValidatingAdmissionPolicy '
               "'gpuportal-pinning' with binding 'gpuportal-pinning' denied request: booked nodes: a100-0")
    [answer] = explain([r.pod("p")], [r.event("Pod", "p", "FailedScheduling", refused)])
    assert answer.code == PodReasonCode.ADMISSION_DENIED and "binding to a node" in answer.text


def test_a_pending_pod_without_a_known_cause_is_unknown_with_its_message() -> None:
    pending = r.pod("p", message="0/1 nodes are available: 1 node(s) had volume node affinity conflict.")
    [answer] = explain([pending], [])
    assert answer.code == PodReasonCode.UNKNOWN and "volume node affinity conflict" in answer.text


@pytest.mark.parametrize(("created", "expected"), [(r.OLD, ["p"]), ("2026-12-05T10:59:30Z", [])])
def test_only_pods_pending_longer_than_the_threshold_are_read(created: str, expected: list[str]) -> None:
    read = pending_read(FakeRest([r.pod("p", created=created, message=r.NO_ROOM)], []), namespace=r.NS,
                        older_than=datetime.timedelta(seconds=60), now=NOW)
    assert [workload.name for workload in read.workloads] == expected


def test_old_refusals_and_other_events_are_not_read_as_waiting() -> None:
    stale = r.event("Job", "gone", "FailedCreate", r.QUOTA_REFUSAL, last="2026-12-05T10:30:00Z")
    normal = r.event("Job", "fine", "SuccessfulCreate", "Created pod: fine-abc")
    rest = FakeRest([], [stale, normal])
    read = pending_read(rest, namespace=r.NS, older_than=datetime.timedelta(seconds=60), now=NOW)
    assert read == PendingRead(workloads=())
    assert [path for path, _ in rest.paths] == [f"/api/v1/namespaces/{r.NS}/pods", f"/api/v1/namespaces/{r.NS}/events"]


def test_every_code_has_a_scenario_here() -> None:
    """The closed list (docs/pending.md) is the one these tests cover."""
    assert {code.value for code in PodReasonCode} == {
        "pod-over-namespace-quota", "pod-asks-more-than-granted", "pod-unschedulable-node-constraint",
        "pod-unschedulable-no-room", "pod-waiting-mig-reconfiguration", "pod-admission-denied", "pod-pending-unknown",
    }

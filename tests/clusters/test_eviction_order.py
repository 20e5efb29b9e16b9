"""Which pods a lowered GPU quota evicts, and in which order (delivery/eviction.py, pure), and how
the Kubernetes side treats the API server's answers (delivery/drivers/kube_evictions.py, with a
scripted API server)."""

from __future__ import annotations

import datetime
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from delivery.drivers import EMPTY_RESULT, DriverError, PermanentDriverError, Scope, kube_evictions
from delivery.drivers.kube_evictions import live_pods, pods_evict
from delivery.drivers.manifests import ManifestsDriver
from delivery.eviction import PodEviction, PodUsage, QuotaLimit, evictions_choose, pod_requests, pod_usage, quota_limits
from delivery.rendering import GrantedUnits, ProjectState, render_project

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def pod(name: str, priority: int, gpus: int = 1, *, minute: int = 0, resource: str = GPU, klass: str = "") -> PodUsage:
    return PodUsage(namespace="team", name=name, priority=priority, priority_class=klass,
                    created=T0 + datetime.timedelta(minutes=minute), requests={resource: gpus} if gpus else {})


def total(hard: dict[str, int]) -> QuotaLimit:
    return QuotaLimit(name="gpuportal-gpu-quota", hard=hard)


def names(chosen: Iterable[PodEviction]) -> list[str]:
    return [eviction.name for eviction in chosen]


def test_lowest_priority_goes_first_and_eviction_stops_as_soon_as_the_quota_fits() -> None:
    pods = [pod("prod", 5000, 2), pod("std", 1000, 2), pod("cheap-a", 100, 1), pod("cheap-b", 100, 2, minute=1)]

    chosen = evictions_choose(pods, [total({GPU: 4})])

    assert names(chosen) == ["cheap-b", "cheap-a"]  # 7 → 5 → 4: std and prod fit and stay
    assert [(e.priority, e.resource, e.amount, e.quota) for e in chosen] == [
        (100, GPU, 2, "gpuportal-gpu-quota"), (100, GPU, 1, "gpuportal-gpu-quota"),
    ]


def test_within_one_priority_the_newest_pod_goes_first_then_by_name() -> None:
    pods = [pod("old", 100, minute=0), pod("new-b", 100, minute=5), pod("new-a", 100, minute=5), pod("mid", 100, minute=2)]

    assert names(evictions_choose(pods, [total({GPU: 1})])) == ["new-a", "new-b", "mid"]


def test_the_choice_does_not_depend_on_the_order_the_api_server_listed_the_pods() -> None:
    pods = [pod(f"p{i}", priority, minute=i % 3) for i, priority in enumerate([100, 1000, 100, 5000, 1000, 100, 0])]
    expected = names(evictions_choose(pods, [total({GPU: 3})]))
    assert len(expected) == 4
    for seed in range(5):
        shuffled = pods[:]
        random.Random(seed).shuffle(shuffled)
        assert names(evictions_choose(shuffled, [total({GPU: 3})])) == expected


def test_a_quota_that_still_fits_evicts_nothing() -> None:
    pods = [pod("a", 100, 2), pod("b", 1000, 2)]
    assert evictions_choose(pods, [total({GPU: 4})]) == []


def test_only_pods_requesting_the_resource_beyond_its_quota_are_evicted() -> None:
    pods = [pod("cpu-only", 0, 0), pod("mig-cheap", 0, 3, resource=MIG), pod("gpu", 1000, 2), pod("gpu-cheap", 100, 1)]

    chosen = evictions_choose(pods, [total({GPU: 2, MIG: 3})])

    assert names(chosen) == ["gpu-cheap"]  # the cheaper MIG pod fits its own limit and stays


def test_a_managed_resource_absent_from_the_quota_counts_as_zero_and_an_unmanaged_one_is_ignored() -> None:
    quota = {"kind": "ResourceQuota", "metadata": {"name": "gpuportal-gpu-quota"},
             "spec": {"hard": {"requests.nvidia.com/gpu": "2", "requests.cpu": "1", "limits.nvidia.com/gpumem": "10"}}}
    limits = quota_limits([quota], managed_resources=[GPU, MIG])
    pods = [pod("mig", 5000, 1, resource=MIG), pod("gpu", 100, 2), pod("fpga", 0, 4, resource="example.com/fpga")]

    assert [limit.hard for limit in limits] == [{GPU: 2, MIG: 0}]
    assert names(evictions_choose(pods, limits)) == ["mig"]


def test_scoped_quotas_are_settled_before_the_total_so_a_class_within_its_grant_keeps_its_pods() -> None:
    # standard was cut from 6 to 4 GPUs; preemptible keeps its 2; the namespace's total is now 8.
    state = ProjectState(cluster="c", namespace="team", department="d", project="team", grants=(
        GrantedUnits(GPU, 4, 1000, 1024, priority_class="gpu-standard"),
        GrantedUnits(GPU, 2, 1000, 1024, priority_class="gpu-production"),
        GrantedUnits(GPU, 2, 1000, 1024, priority_class="gpu-preemptible"),
    ))
    limits = quota_limits(render_project(state), managed_resources=[GPU])
    pods = [pod("std-a", 1000, 2, minute=0, klass="gpu-standard"), pod("std-b", 1000, 2, minute=1, klass="gpu-standard"),
            pod("std-c", 1000, 2, minute=2, klass="gpu-standard"), pod("prod", 5000, 2, klass="gpu-production"),
            pod("cheap", 100, 2, klass="gpu-preemptible")]

    assert [limit.name for limit in limits][-1] == "gpuportal-gpu-quota"  # the total last
    chosen = evictions_choose(pods, limits)

    assert [(e.name, e.quota) for e in chosen] == [("std-c", "gpuportal-priority-gpu-standard")]


def test_a_reclaimed_class_loses_every_pod_through_the_other_classes_quota() -> None:
    state = ProjectState(cluster="c", namespace="team", department="d", project="team",
                         grants=(GrantedUnits(GPU, 4, 1000, 1024, priority_class="gpu-standard"),))
    limits = quota_limits(render_project(state), managed_resources=[GPU])
    pods = [pod("std", 1000, 3, klass="gpu-standard"), pod("cheap", 100, 1, klass="gpu-preemptible"),
            pod("classless", 0, 1)]

    chosen = evictions_choose(pods, limits)

    assert {(e.name, e.quota) for e in chosen} == {
        ("cheap", "gpuportal-priority-other"), ("classless", "gpuportal-priority-other"),
    }


def test_an_idle_namespace_evicts_every_gpu_pod() -> None:
    state = ProjectState(cluster="c", namespace="team", department="d", project="team", grants=(),
                         idle_resources=(GPU, MIG))
    limits = quota_limits(render_project(state, retain_namespace=True), managed_resources=[GPU, MIG])
    pods = [pod("a", 5000, 1), pod("b", 100, 2, resource=MIG), pod("idle", 0, 0)]

    assert sorted(names(evictions_choose(pods, limits))) == ["a", "b"]


def test_a_quota_with_a_scope_it_cannot_match_is_left_alone() -> None:
    odd = {"kind": "ResourceQuota", "metadata": {"name": "x"},
           "spec": {"hard": {"requests.nvidia.com/gpu": "0"}, "scopes": ["BestEffort"]}}
    namespaces = {"kind": "ResourceQuota", "metadata": {"name": "y"}, "spec": {"hard": {"requests.nvidia.com/gpu": "0"},
                  "scopeSelector": {"matchExpressions": [{"scopeName": "CrossNamespacePodAffinity", "operator": "Exists"}]}}}
    assert quota_limits([odd, namespaces], managed_resources=[GPU]) == []


def test_finished_and_terminating_pods_hold_nothing() -> None:
    metadata = {"name": "p", "namespace": "team", "creationTimestamp": "2026-01-01T00:00:00Z"}
    base: dict[str, Any] = {"metadata": metadata,
            "spec": {"priority": 7, "containers": [{"name": "c", "resources": {"limits": {GPU: "2"}}}]},
            "status": {"phase": "Running"}}
    usage = pod_usage(base)
    assert usage is not None and (usage.priority, dict(usage.requests), usage.created) == (7, {GPU: 2}, T0)
    assert pod_usage({**base, "status": {"phase": "Succeeded"}}) is None
    assert pod_usage({**base, "status": {"phase": "Failed"}}) is None
    assert pod_usage({**base, "metadata": {**metadata, "deletionTimestamp": "2026-01-01T00:01:00Z"}}) is None


def test_a_pods_requests_count_its_largest_init_container_and_its_sidecars() -> None:
    spec = {
        "initContainers": [
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {GPU: "1"}}},
            {"name": "warmup", "resources": {"limits": {GPU: "4"}}},
        ],
        "containers": [{"name": "a", "resources": {"requests": {GPU: "1", "cpu": "2"}}},
                       {"name": "b", "resources": {"requests": {MIG: "2"}}}],
    }
    assert pod_requests(spec) == {GPU: 5, MIG: 2}  # warmup (4) runs next to the sidecar (1)
    del spec["initContainers"][1]
    assert pod_requests(spec) == {GPU: 2, MIG: 2}


# ---------------------------------------------------------------- the Kubernetes side, scripted


class ScriptedRest:
    """Answers eviction requests from a script: pod name → (status, payload)."""

    cluster = "test"

    def __init__(self, answers: dict[str, tuple[int, Any]], pages: list[dict[str, Any]] | None = None) -> None:
        self.answers = answers
        self.pages = pages or []
        self.calls: list[tuple[str, str, dict[str, str] | None]] = []

    def request(self, method: str, path: str, *, query: dict[str, str] | None = None, body: Any = None,
                content_type: str = "application/json") -> tuple[int, Any]:
        self.calls.append((method, path, query))
        if method == "GET":
            page = self.pages.pop(0)
            return page if isinstance(page, tuple) else (200, page)
        assert body["kind"] == "Eviction" and body["apiVersion"] == "policy/v1"
        answer = self.answers[body["metadata"]["name"]]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def checked(self, method: str, path: str, *, what: str, allow: Iterable[int] = (), **kwargs: Any) -> tuple[int, Any]:
        return self.request(method, path, **kwargs)

    def failure(self, status: int, payload: Any, *, what: str) -> DriverError:
        text = f"{what}: HTTP {status}"
        return PermanentDriverError(text) if status == 403 else DriverError(text)


def chosen(*pods: str) -> list[PodEviction]:
    return [PodEviction("team", name, 100, GPU, 1, "gpuportal-gpu-quota") for name in pods]


def test_a_budget_holds_a_pod_back_without_failing_and_a_pod_gone_meanwhile_is_skipped() -> None:
    budget = {"message": "Cannot evict pod as it would violate the pod's disruption budget.",
              "details": {"causes": [{"message": "The disruption budget cheap needs 1 healthy pods and has 1 currently"}]}}
    rest = ScriptedRest({"a": (201, {}), "b": (429, budget), "c": (404, {}), "d": (500, {"message": "This pod has more "
                         "than one PodDisruptionBudget, which the eviction subresource does not support."})})

    result = pods_evict(rest, chosen("a", "b", "c", "d"))

    assert names(result.evicted) == ["a"]
    assert names(result.held_back) == ["b", "d"]
    assert "needs 1 healthy pods" in result.held_back[0].reason and result.held_back[0].reason.startswith("HTTP 429")
    assert [path for _, path, _ in rest.calls][0] == "/api/v1/namespaces/team/pods/a/eviction"


def test_missing_rights_stop_the_evictions_and_fail_the_push_naming_the_pods_already_evicted() -> None:
    rest = ScriptedRest({"a": (201, {}), "b": (403, {"message": "forbidden"}), "c": (201, {})})

    with pytest.raises(PermanentDriverError, match=r"evict pod team/b: HTTP 403 \(evicted before this failure: team/a\)"):
        pods_evict(rest, chosen("a", "b", "c"))
    assert len(rest.calls) == 2  # c was not tried


def test_an_unreachable_api_server_is_a_transient_failure() -> None:
    rest = ScriptedRest({"a": DriverError("unreachable")})  # type: ignore[dict-item]
    with pytest.raises(DriverError) as failure:
        pods_evict(rest, chosen("a"))
    assert not isinstance(failure.value, PermanentDriverError)


def test_the_live_pods_are_read_namespace_by_namespace_page_by_page_never_across_the_cluster() -> None:
    def item(name: str, namespace: str, gpus: int) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": namespace},
                "spec": {"containers": [{"resources": {"limits": {GPU: str(gpus)}} if gpus else {}}]}}

    rest = ScriptedRest({}, pages=[
        {"items": [item("b", "other", 2)], "metadata": {}},
        {"items": [item("a", "team", 1)], "metadata": {"continue": "t1"}},
        {"items": [item("cpu", "team", 0)], "metadata": {}},
    ])

    pods, reads = live_pods(rest, namespaces=["other", "team"])

    assert [(p.namespace, p.name) for p in pods] == [("other", "b"), ("team", "a")] and reads == 3
    assert [path for _, path, _ in rest.calls] == [
        "/api/v1/namespaces/other/pods", "/api/v1/namespaces/team/pods", "/api/v1/namespaces/team/pods"]
    assert rest.calls[2][2] is not None and rest.calls[2][2]["continue"] == "t1"
    assert rest.calls[0][2] is not None and rest.calls[0][2]["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed"


def test_a_pod_list_refused_just_after_the_binding_was_created_is_asked_again_then_retried_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kube_evictions, "pause", lambda seconds: None)
    refused = (403, {"message": 'pods is forbidden: User "portal" cannot list resource "pods"'})
    rest = ScriptedRest({}, pages=[refused, {"items": [], "metadata": {}}])  # type: ignore[list-item]
    assert live_pods(rest, namespaces=["team"], fresh=frozenset({"team"})) == ([], 2)

    rest = ScriptedRest({}, pages=[refused] * 5)  # type: ignore[list-item]
    with pytest.raises(DriverError) as failure:
        live_pods(rest, namespaces=["team"], fresh=frozenset({"team"}))
    assert not isinstance(failure.value, PermanentDriverError) and "list Pods in team: HTTP 403" in str(failure.value)

    rest = ScriptedRest({}, pages=[refused])  # type: ignore[list-item]
    with pytest.raises(PermanentDriverError):  # a binding that has been there: the rights are missing
        live_pods(rest, namespaces=["team"])


def test_a_manifests_folder_has_nothing_to_evict(tmp_path: Path) -> None:
    driver = ManifestsDriver(root=tmp_path, cluster="c")
    quota = {"kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "team"}, "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}}
    assert driver.enforce_quotas([Scope(namespace="team", objects=[quota], managed_resources=(GPU,))]) == EMPTY_RESULT

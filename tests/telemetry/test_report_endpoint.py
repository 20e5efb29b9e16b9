"""POST /api/v1/nodes/{name}/report: authentication, validation, ordering and what a report stores."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from audit.models import AuditEvent
from clusters.models import Cluster, Gpu
from telemetry.models import GpuSample, NodeReportState, NodeToken, ObservedGpu, SampleTier
from telemetry.node_tokens import node_token_revoke
from tests.conftest import World
from tests.telemetry.fixtures import A100, add_node, make_report, post_report

IssueToken = Callable[..., tuple[NodeToken, str]]
NODE = "gpu-a100-07"


@pytest.fixture
def a100_node(world: World) -> Any:
    return add_node(world.cluster, NODE)


def test_it_accepts_a_report_and_fills_the_inventory_by_uuid(
    world: World, a100_node: Any, issue_token: IssueToken, agent: APIClient
) -> None:
    _, token = issue_token(NODE)
    report = make_report("a100-80gb-mig", node_name=NODE)
    response = post_report(agent, NODE, report, token)
    assert response.status_code == 200, response.json()
    assert response.json()["accepted"] is True

    gpu = Gpu.objects.get(node=a100_node, index=0)
    assert gpu.uuid == report["gpus"][0]["uuid"]
    assert gpu.model == A100  # NVML's "NVIDIA A100-SXM4-80GB" in the label form flavors use
    assert gpu.memory_mib == 81920 and gpu.mig_capable is True
    observed = ObservedGpu.objects.get(node=a100_node)
    assert observed.gpu == gpu and observed.is_present
    assert observed.mig_mode_current == "enabled"
    profiles = sorted(observed.mig_instances.values_list("profile", flat=True))
    assert profiles == ["2g.20gb", "2g.20gb", "3g.40gb"]
    assert observed.memory_used_bytes == report["gpus"][0]["memory_used_bytes"]
    state = NodeReportState.objects.get(node=a100_node)
    assert (state.sequence, state.interval_seconds, state.driver_version) == (1, 30, report["driver_version"])
    assert state.stale_at is not None and state.received_at is not None
    assert state.stale_at - state.received_at == datetime.timedelta(seconds=90)
    assert GpuSample.objects.filter(gpu=observed, tier=SampleTier.RAW).count() == 1
    assert AuditEvent.objects.filter(action="node.gpus_observed", target_id=str(a100_node.pk)).count() == 1
    changed = AuditEvent.objects.filter(action="node.updated", target_id=str(a100_node.pk)).order_by("seq").last()
    assert changed is not None and changed.details == {"source": "node agent"}
    assert changed.after["gpus"][0][1] == report["gpus"][0]["uuid"]


def test_a_steady_report_writes_readings_but_no_audit_event(
    world: World, a100_node: Any, issue_token: IssueToken, agent: APIClient
) -> None:
    _, token = issue_token(NODE)
    assert post_report(agent, NODE, make_report("a100-80gb-mig", node_name=NODE, sequence=1), token).status_code == 200
    events = AuditEvent.objects.count()
    second = make_report("a100-80gb-mig", node_name=NODE, sequence=2)
    second["gpus"][0]["memory_used_bytes"] = 1234
    assert post_report(agent, NODE, second, token).json()["accepted"] is True
    assert AuditEvent.objects.count() == events
    assert ObservedGpu.objects.get(node=a100_node).memory_used_bytes == 1234
    assert GpuSample.objects.filter(tier=SampleTier.RAW).count() == 2
    assert NodeReportState.objects.get(node=a100_node).reports_accepted == 2


# ------------------------------------------------------------------------------ authentication


def test_it_answers_401_without_a_token(world: World, a100_node: Any, agent: APIClient) -> None:
    response = post_report(agent, NODE, make_report("a100-80gb-mig", node_name=NODE), None)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("header", ["Bearer gpn_0123456789abcdef_" + "x" * 43, "Bearer not-a-token", "Token abc", "Bearer "])
def test_it_answers_401_for_an_unknown_or_malformed_token(
    world: World, a100_node: Any, issue_token: IssueToken, agent: APIClient, header: str
) -> None:
    issue_token(NODE)
    response = agent.post(
        f"/api/v1/nodes/{NODE}/report", data=b"{}", content_type="application/json", HTTP_AUTHORIZATION=header
    )
    assert response.status_code == 401


def test_a_user_session_or_api_token_is_not_a_node_token(world: World, a100_node: Any) -> None:
    client = APIClient()
    assert client.login(username="platform", password="pw-platform")
    response = post_report(client, NODE, make_report("a100-80gb-mig", node_name=NODE), None)
    assert response.status_code == 401
    api_token = APIClient().post("/api/v1/auth/token/", {"username": "platform", "password": "pw-platform"}, format="json").json()
    response = post_report(APIClient(), NODE, make_report("a100-80gb-mig", node_name=NODE), None,
                           HTTP_AUTHORIZATION=f"Token {api_token['token']}")  # fmt: skip
    assert response.status_code == 401


def test_a_token_of_another_node_gets_403(world: World, a100_node: Any, issue_token: IssueToken, agent: APIClient) -> None:
    add_node(world.cluster, "gpu-b")
    _, other = issue_token("gpu-b")
    response = post_report(agent, NODE, make_report("a100-80gb-mig", node_name=NODE), other)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    # ... also when the body claims the token's node but the URL names another
    response = post_report(agent, NODE, make_report("a100-80gb-mig", node_name="gpu-b"), other)
    assert response.status_code == 403
    assert not ObservedGpu.objects.exists()


def test_a_body_naming_another_node_gets_403(world: World, a100_node: Any, issue_token: IssueToken, agent: APIClient) -> None:
    add_node(world.cluster, "gpu-b")
    _, token = issue_token(NODE)
    response = post_report(agent, NODE, make_report("a100-80gb-mig", node_name="gpu-b"), token)
    assert response.status_code == 403
    assert not ObservedGpu.objects.exists()


def test_a_revoked_token_gets_403(world: World, a100_node: Any, issue_token: IssueToken, agent: APIClient) -> None:
    row, token = issue_token(NODE)
    node_token_revoke(actor=world.users["platform"], token_id=row.pk)
    response = post_report(agent, NODE, make_report("a100-80gb-mig", node_name=NODE), token)
    assert response.status_code == 403
    assert "revoked" in response.json()["error"]["message"]


def test_the_token_names_the_cluster_so_equal_node_names_stay_apart(
    world: World, a100_node: Any, issue_token: IssueToken, agent: APIClient
) -> None:
    other_cluster = Cluster.objects.create(name="other-cluster")
    twin = add_node(other_cluster, NODE)
    _, token = issue_token(NODE, other_cluster)
    assert post_report(agent, NODE, make_report("a100-80gb-mig", node_name=NODE), token).status_code == 200
    assert ObservedGpu.objects.get().node == twin
    assert not Gpu.objects.get(node=a100_node).uuid


def test_a_node_missing_from_the_inventory_gets_404(world: World, issue_token: IssueToken, agent: APIClient) -> None:
    _, token = issue_token("not-discovered-yet")
    response = post_report(agent, "not-discovered-yet", make_report("a100-80gb-mig", node_name="not-discovered-yet"), token)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "node_unknown"


def test_token_use_is_recorded(world: World, a100_node: Any, issue_token: IssueToken, agent: APIClient) -> None:
    row, token = issue_token(NODE)
    assert row.last_used_at is None
    post_report(agent, NODE, make_report("a100-80gb-mig", node_name=NODE), token)
    row.refresh_from_db()
    assert row.last_used_at is not None


# ---------------------------------------------------------------------------------- bad bodies


def _broken(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    report = make_report("h200-8gpu-node", node_name=NODE)
    change(report)
    return report


def _drop_uuid(report: dict[str, Any]) -> None:
    del report["gpus"][2]["uuid"]


def _unknown_field(report: dict[str, Any]) -> None:
    report["gpus"][0]["mig_instances"] = []
    report["gpus"][0]["vendor"] = "nvidia"


@pytest.mark.parametrize(
    ("change", "pointer"),
    [
        (_drop_uuid, "/gpus/2/uuid"),
        (_unknown_field, "/gpus/0/vendor"),
        (lambda r: r.update(sequence="7"), "/sequence"),
        (lambda r: r.update(sequence=True), "/sequence"),
        (lambda r: r.update(interval_seconds=0), "/interval_seconds"),
        (lambda r: r.update(collected_at="2026-11-29 08:00:00"), "/collected_at"),
        (lambda r: r.update(collected_at="2026-13-29T08:00:00.000Z"), "/collected_at"),
        (lambda r: r["gpus"][1].update(uuid="GPU-NOT-A-UUID"), "/gpus/1/uuid"),
        (lambda r: r["gpus"][1].update(mig_mode={"current": "on", "pending": "on"}), "/gpus/1/mig_mode/current"),
        (lambda r: r["gpus"][1].update(temperature_celsius=-3), "/gpus/1/temperature_celsius"),
        (lambda r: r["gpus"][1].update(utilization={"gpu_percent": 101, "memory_percent": 1}), "/gpus/1/utilization/gpu_percent"),
        (lambda r: r["gpus"][1].update(unsupported=["x", "x"]), "/gpus/1/unsupported"),
        (lambda r: r["gpus"][1].update(processes="none"), "/gpus/1/processes"),
        (lambda r: r["gpus"].extend([r["gpus"][0]] * 57), "/gpus"),
        (lambda r: r["gpus"][3].update(uuid=r["gpus"][0]["uuid"]), "/gpus/3/uuid"),
        (lambda r: r["gpus"][3].update(index=0), "/gpus/3/index"),
        (lambda r: r.update({"a/b~c": 1}), "/a~1b~0c"),
    ],
)
def test_a_bad_report_gets_400_naming_the_json_pointer(
    world: World, issue_token: IssueToken, agent: APIClient, change: Callable[[dict[str, Any]], None], pointer: str
) -> None:
    add_node(world.cluster, NODE, gpus=8, model="NVIDIA-H200", memory_mib=143771)
    _, token = issue_token(NODE)
    response = post_report(agent, NODE, _broken(change), token)
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert pointer in error["fields"], error
    assert pointer in error["message"]
    assert not ObservedGpu.objects.exists()


def test_an_unknown_schema_version_gets_400(world: World, a100_node: Any, issue_token: IssueToken, agent: APIClient) -> None:
    _, token = issue_token(NODE)
    report = make_report("a100-80gb-mig", node_name=NODE)
    report["schema_version"] = 2
    response = post_report(agent, NODE, report, token)
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["/schema_version"]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", "parse_error"),
        (b"", "parse_error"),
        (b'{"sequence": NaN}', "parse_error"),
        (b"\xff\xfe", "parse_error"),
        (b"[1, 2]", "invalid"),
        (b"[" * 100000 + b"]" * 100000, "invalid"),
    ],
)
def test_a_body_that_is_not_a_report_object_gets_400_on_body(
    world: World, a100_node: Any, issue_token: IssueToken, agent: APIClient, body: bytes, code: str
) -> None:
    _, token = issue_token(NODE)
    response = post_report(agent, NODE, body, token)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert list(response.json()["error"]["fields"]) == ["body"]


def test_an_oversized_body_gets_413(world: World, a100_node: Any, issue_token: IssueToken, agent: APIClient) -> None:
    _, token = issue_token(NODE)
    report = make_report("a100-80gb-mig", node_name=NODE)
    body = (b'{"padding": "' + b"x" * (2 * 1024 * 1024) + b'"}')
    response = post_report(agent, NODE, body, token)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert post_report(agent, NODE, report, token).status_code == 200


def test_a_body_that_is_not_json_typed_gets_415(world: World, a100_node: Any, issue_token: IssueToken, agent: APIClient) -> None:
    _, token = issue_token(NODE)
    response = agent.post(f"/api/v1/nodes/{NODE}/report", data="x=1", content_type="application/x-www-form-urlencoded",
                          HTTP_AUTHORIZATION=f"Bearer {token}")  # fmt: skip
    assert response.status_code == 415


# ------------------------------------------------------------------------------------- ordering


def test_an_older_or_repeated_report_is_answered_2xx_and_discarded(
    world: World, a100_node: Any, issue_token: IssueToken, agent: APIClient
) -> None:
    _, token = issue_token(NODE)
    newer = make_report("a100-80gb-mig", node_name=NODE, sequence=5)
    newer["gpus"][0]["memory_used_bytes"] = 5
    assert post_report(agent, NODE, newer, token).json()["accepted"] is True
    for sequence in (4, 5):
        older = make_report("a100-80gb-mig", node_name=NODE, sequence=sequence)
        older["gpus"][0]["memory_used_bytes"] = 4
        response = post_report(agent, NODE, older, token)
        assert response.status_code == 200
        assert response.json() == {"accepted": False, "reason": "out_of_order", "stale_at": response.json()["stale_at"]}
    earlier_process = make_report(
        "a100-80gb-mig", node_name=NODE, sequence=99, started=datetime.datetime(2026, 11, 29, 7, tzinfo=datetime.UTC)
    )
    assert post_report(agent, NODE, earlier_process, token).json()["accepted"] is False
    assert ObservedGpu.objects.get().memory_used_bytes == 5
    state = NodeReportState.objects.get()
    assert (state.sequence, state.reports_accepted, state.reports_discarded) == (5, 1, 3)
    restarted = make_report(
        "a100-80gb-mig", node_name=NODE, sequence=0, started=datetime.datetime(2026, 11, 29, 9, tzinfo=datetime.UTC)
    )
    assert post_report(agent, NODE, restarted, token).json()["accepted"] is True
    assert NodeReportState.objects.get().sequence == 0

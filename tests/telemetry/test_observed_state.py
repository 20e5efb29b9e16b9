"""What reports do to the observed state: presence, unidentified GPUs, the inventory by UUID, MIG
mismatch flags, staleness, and the read endpoints."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from allocations.models import Allocation, Reservation
from audit.models import AuditEvent
from clusters.models import Gpu, Node
from delivery.node_configs import mig_config_entries, mig_config_key
from delivery.selectors import node_plans
from telemetry import mig
from telemetry.ingest.report import node_report_ingest
from telemetry.models import NodeReportState, NodeToken, ObservedGpu
from telemetry.staleness import nodes_mark_stale
from tests.conftest import World
from tests.telemetry.fixtures import add_node, make_report, post_report

IssueToken = Callable[..., tuple[NodeToken, str]]
H200 = "NVIDIA-H200"
MIG_LABEL = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"


def _events(action: str, node: Node) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action, target_id=str(node.pk)).order_by("seq"))


@pytest.fixture
def h200_node(world: World) -> Node:
    return add_node(world.cluster, "gpu-h200-01", gpus=8, model=H200, memory_mib=143771)


# -------------------------------------------------------------------------------- presence


def test_gpus_missing_from_a_report_are_marked_absent_not_deleted(
    world: World, h200_node: Node, issue_token: IssueToken, agent: APIClient
) -> None:
    _, token = issue_token(h200_node.name)
    full = make_report("h200-8gpu-node", node_name=h200_node.name, sequence=1)
    assert post_report(agent, h200_node.name, full, token).json()["accepted"]
    assert ObservedGpu.objects.filter(node=h200_node, is_present=True).count() == 8

    partial = make_report("h200-8gpu-node", node_name=h200_node.name, sequence=2)
    missing = [partial["gpus"].pop(6), partial["gpus"].pop(2)]
    assert post_report(agent, h200_node.name, partial, token).json()["accepted"]
    absent = ObservedGpu.objects.filter(node=h200_node, is_present=False)
    assert sorted(absent.values_list("uuid", flat=True)) == sorted(gpu["uuid"] for gpu in missing)
    assert all(row.absent_since is not None for row in absent)
    assert Gpu.objects.filter(node=h200_node).count() == 8  # the inventory keeps them (reservations)
    event = _events("node.gpus_observed", h200_node)[-1]
    assert sorted(item["index"] for item in event.details["absent"]) == [2, 6]

    assert post_report(agent, h200_node.name, make_report("h200-8gpu-node", node_name=h200_node.name, sequence=3), token)
    assert ObservedGpu.objects.filter(node=h200_node, is_present=True).count() == 8
    event = _events("node.gpus_observed", h200_node)[-1]
    assert sorted(item["index"] for item in event.details["returned"]) == [2, 6]


def test_a_gpu_reported_without_uuid_keeps_its_previous_state_and_is_flagged(
    world: World, h200_node: Node, issue_token: IssueToken, agent: APIClient
) -> None:
    _, token = issue_token(h200_node.name)
    post_report(agent, h200_node.name, make_report("h200-8gpu-node", node_name=h200_node.name, sequence=1), token)
    before = ObservedGpu.objects.get(node=h200_node, index=3)

    report = make_report("h200-8gpu-node", node_name=h200_node.name, sequence=2)
    lost = report["gpus"][3]
    lost.update(uuid=None, memory_used_bytes=None, temperature_celsius=None)
    lost["errors"] = [{"call": "nvmlDeviceGetUUID", "field": "uuid", "error": "NVMLError_GpuIsLost", "code": 15,
                       "message": "GPU is lost"}]  # fmt: skip
    assert post_report(agent, h200_node.name, report, token).json()["accepted"]

    after = ObservedGpu.objects.get(pk=before.pk)
    assert after.is_present and after.memory_used_bytes == before.memory_used_bytes
    assert after.temperature_celsius == before.temperature_celsius
    assert NodeReportState.objects.get(node=h200_node).unidentified_gpus == [3]
    event = _events("node.gpus_observed", h200_node)[-1]
    assert event.after == {"unidentified": [3]} and event.details["absent"] == []


def test_a_failed_gpu_count_leaves_presence_as_it_was(
    world: World, h200_node: Node, issue_token: IssueToken, agent: APIClient
) -> None:
    _, token = issue_token(h200_node.name)
    post_report(agent, h200_node.name, make_report("h200-8gpu-node", node_name=h200_node.name, sequence=1), token)
    blind = make_report("h200-8gpu-node", node_name=h200_node.name, sequence=2)
    blind["gpus"] = []
    blind["errors"] = [{"call": "nvmlDeviceGetCount", "field": "gpus", "error": "NVMLError_Unknown", "code": 999,
                        "message": "Unknown Error"}]  # fmt: skip
    assert post_report(agent, h200_node.name, blind, token).json()["accepted"]
    assert ObservedGpu.objects.filter(node=h200_node, is_present=True).count() == 8
    assert NodeReportState.objects.get(node=h200_node).errors == blind["errors"]


def test_a_node_with_failing_gpus_is_stored_with_what_could_be_read(
    world: World, issue_token: IssueToken, agent: APIClient
) -> None:
    node = add_node(world.cluster, "gpu-l4-01", gpus=3, model="NVIDIA-L4", memory_mib=23034, mig_capable=False)
    _, token = issue_token(node.name)
    response = post_report(agent, node.name, make_report("faulty-gpus-node", node_name=node.name), token)
    assert response.status_code == 200, response.json()
    assert sorted(ObservedGpu.objects.filter(node=node).values_list("index", flat=True)) == [0, 1]
    lost = ObservedGpu.objects.get(node=node, index=1)
    assert lost.memory_total_bytes is None and lost.errors
    assert NodeReportState.objects.get(node=node).unidentified_gpus == [2]
    inventory = {gpu.index: gpu for gpu in Gpu.objects.filter(node=node)}
    assert inventory[0].uuid and inventory[1].uuid and not inventory[2].uuid
    assert inventory[0].memory_mib == 23034 and inventory[1].memory_mib == 23034  # unknown memory is not zeroed
    assert inventory[0].mig_capable is False


# ------------------------------------------------------------------------ inventory by UUID


def test_the_inventory_follows_uuids_when_indexes_change(
    world: World, h200_node: Node, issue_token: IssueToken, agent: APIClient
) -> None:
    _, token = issue_token(h200_node.name)
    post_report(agent, h200_node.name, make_report("h200-8gpu-node", node_name=h200_node.name, sequence=1), token)
    rows = {gpu.uuid: gpu.pk for gpu in Gpu.objects.filter(node=h200_node)}

    swapped = make_report("h200-8gpu-node", node_name=h200_node.name, sequence=2)
    swapped["gpus"][0]["index"], swapped["gpus"][1]["index"] = 1, 0
    assert post_report(agent, h200_node.name, swapped, token).json()["accepted"]
    after = {gpu.uuid: (gpu.pk, gpu.index) for gpu in Gpu.objects.filter(node=h200_node)}
    assert {uuid: pk for uuid, (pk, _) in after.items()} == rows  # same rows, keyed by UUID
    assert after[swapped["gpus"][0]["uuid"]][1] == 1 and after[swapped["gpus"][1]["uuid"]][1] == 0


def test_a_replaced_card_takes_over_the_inventory_row_at_its_index(
    world: World, h200_node: Node, issue_token: IssueToken, agent: APIClient
) -> None:
    _, token = issue_token(h200_node.name)
    post_report(agent, h200_node.name, make_report("h200-8gpu-node", node_name=h200_node.name, sequence=1), token)
    row = Gpu.objects.get(node=h200_node, index=5)
    old_uuid = row.uuid
    replaced = make_report("h200-8gpu-node", node_name=h200_node.name, sequence=2)
    replaced["gpus"][5]["uuid"] = "GPU-00000000-1111-2222-3333-444444444444"
    assert post_report(agent, h200_node.name, replaced, token).json()["accepted"]
    row.refresh_from_db()
    assert row.uuid == "GPU-00000000-1111-2222-3333-444444444444" and row.index == 5
    old = ObservedGpu.objects.get(node=h200_node, uuid=old_uuid)
    assert not old.is_present and old.gpu is None
    assert ObservedGpu.objects.get(node=h200_node, uuid=row.uuid).gpu == row


def test_a_gpu_the_inventory_lacks_is_added(world: World, issue_token: IssueToken, agent: APIClient) -> None:
    node = add_node(world.cluster, "gpu-h200-02", gpus=6, model=H200, memory_mib=143771)
    _, token = issue_token(node.name)
    post_report(agent, node.name, make_report("h200-8gpu-node", node_name=node.name), token)
    assert sorted(Gpu.objects.filter(node=node).values_list("index", flat=True)) == list(range(8))
    assert set(Gpu.objects.filter(node=node).values_list("model", flat=True)) == {H200}


def test_an_unreported_gpu_standing_where_a_reported_one_moves_is_moved_aside(world: World) -> None:
    from clusters.inventory import ObservedGpuSpec, node_gpus_observe

    node = add_node(world.cluster, "gpu-two", gpus=2, model=H200)
    a, b = "GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-0000-0000-0000-000000000000"
    node_gpus_observe(node=node, gpus=[ObservedGpuSpec(index=0, uuid=a), ObservedGpuSpec(index=1, uuid=b)])
    node_gpus_observe(node=node, gpus=[ObservedGpuSpec(index=1, uuid=a)])  # b gone, a now at index 1
    indexes = dict(Gpu.objects.filter(node=node).values_list("uuid", "index"))
    assert indexes[a] == 1 and indexes[b] == 2  # b's row kept, out of a's way


# ------------------------------------------------------------------------------- MIG layout


def _mig_disabled(report: dict[str, Any]) -> dict[str, Any]:
    gpu = report["gpus"][0]
    gpu.update(mig_mode={"current": "disabled", "pending": "disabled"}, mig_instances=[], processes=[],
               utilization={"gpu_percent": 3, "memory_percent": 1}, unsupported=[])  # fmt: skip
    return report


def test_a_mig_layout_that_differs_from_the_plan_is_flagged_and_cleared(
    world: World, issue_token: IssueToken, agent: APIClient
) -> None:
    node = add_node(world.cluster, "gpu-a100-07", labels={MIG_LABEL: "all-disabled", MIG_STATE: "success"})
    _, token = issue_token(node.name)
    post_report(agent, node.name, make_report("a100-80gb-mig", node_name=node.name, sequence=1), token)
    state = NodeReportState.objects.get(node=node)
    assert state.mig_mismatch and not state.mig_reset_pending
    assert state.mig_detail["problems"] == [{"gpu_index": 0, "kind": "mig_mode", "expected": "disabled", "actual": "enabled"}]
    flagged = _events("node.mig_mismatch_flagged", node)
    assert len(flagged) == 1 and flagged[0].details == {"flag": "mig_layout"}

    post_report(agent, node.name, make_report("a100-80gb-mig", node_name=node.name, sequence=2), token)
    assert len(_events("node.mig_mismatch_flagged", node)) == 1  # flagged once, not per report

    post_report(agent, node.name, _mig_disabled(make_report("a100-80gb-mig", node_name=node.name, sequence=3)), token)
    state.refresh_from_db()
    assert not state.mig_mismatch and state.mig_detail["problems"] == []
    assert len(_events("node.mig_mismatch_cleared", node)) == 1
    telemetry = world.client("nlp_member").get(f"/api/v1/telemetry/nodes/{node.pk}/").json()
    assert telemetry["report"]["mig_mismatch"] is False
    assert telemetry["gpus"][0]["mig_instances"] == []


def test_profiles_are_compared_with_a_well_known_config(world: World, issue_token: IssueToken, agent: APIClient) -> None:
    node = add_node(world.cluster, "gpu-a100-08", labels={MIG_LABEL: "all-1g.10gb", MIG_STATE: "success"})
    _, token = issue_token(node.name)
    post_report(agent, node.name, make_report("a100-80gb-mig", node_name=node.name), token)
    problem = NodeReportState.objects.get(node=node).mig_detail["problems"][0]
    assert problem == {"gpu_index": 0, "kind": "profiles", "expected": {"1g.10gb": 7},
                       "actual": {"2g.20gb": 2, "3g.40gb": 1}}  # fmt: skip


def test_a_rendered_layout_is_compared_with_what_the_engine_booked(
    world: World, issue_token: IssueToken, agent: APIClient
) -> None:
    node = add_node(world.cluster, "gpu-a100-10")
    Node.objects.filter(pk=node.pk).update(sharing="mig")
    holder = Allocation.objects.create(
        project=world.llm, flavor=world.mig, quantity=3, priority_class=world.standard, cluster=world.cluster,
        starts_at=timezone.now(), ends_at=timezone.now() + datetime.timedelta(days=1), justification="x",
        requested_by=world.users["nlp_member"], state="active",
    )
    booked = [("2g.20gb", 0), ("2g.20gb", 2), ("3g.40gb", 4)]  # what the recorded GPU reports
    for unit, (profile, start) in enumerate(booked):
        Reservation.objects.create(allocation=holder, unit=unit, node=node, gpu_indices=[0], gpu_milli=0,
                                   mig_profile=profile, mig_start=start)
    [plan] = node_plans(cluster=world.cluster, node_ids=[node.pk])
    key = mig_config_key(mig_config_entries(plan))
    Node.objects.filter(pk=node.pk).update(labels={MIG_LABEL: key, MIG_STATE: "success"})
    _, token = issue_token(node.name)
    post_report(agent, node.name, make_report("a100-80gb-mig", node_name=node.name, sequence=1), token)
    state = NodeReportState.objects.get(node=node)
    assert not state.mig_mismatch and state.mig_detail["plan"] == "compared"

    Reservation.objects.filter(allocation=holder, mig_profile="3g.40gb").update(mig_profile="1g.10gb", mig_start=4)
    [plan] = node_plans(cluster=world.cluster, node_ids=[node.pk])
    Node.objects.filter(pk=node.pk).update(
        labels={MIG_LABEL: mig_config_key(mig_config_entries(plan)), MIG_STATE: "success"}
    )
    post_report(agent, node.name, make_report("a100-80gb-mig", node_name=node.name, sequence=2), token)
    state.refresh_from_db()
    assert state.mig_mismatch
    assert state.mig_detail["problems"] == [{"gpu_index": 0, "kind": "profiles", "expected": {"1g.10gb": 1, "2g.20gb": 2},
                                             "actual": {"2g.20gb": 2, "3g.40gb": 1}}]  # fmt: skip


@pytest.mark.parametrize(
    ("labels", "plan"),
    [
        ({MIG_LABEL: "all-disabled", MIG_STATE: "pending"}, "applying"),
        ({MIG_LABEL: "all-disabled", MIG_STATE: "rebooting"}, "applying"),
        ({MIG_LABEL: "gpuportal-0123456789ab", MIG_STATE: "success"}, "unknown"),
        ({}, "unknown"),
    ],
)
def test_no_mismatch_while_the_plan_is_applying_or_unknown(
    world: World, issue_token: IssueToken, agent: APIClient, labels: dict[str, str], plan: str
) -> None:
    node = add_node(world.cluster, "gpu-a100-09", labels=labels)
    _, token = issue_token(node.name)
    post_report(agent, node.name, make_report("a100-80gb-mig", node_name=node.name), token)
    state = NodeReportState.objects.get(node=node)
    assert not state.mig_mismatch and state.mig_detail["plan"] == plan


def test_a_failed_mig_manager_is_a_mismatch(world: World, issue_token: IssueToken, agent: APIClient) -> None:
    node = add_node(world.cluster, "gpu-a100-10", labels={MIG_LABEL: "all-enabled", MIG_STATE: "failed"})
    _, token = issue_token(node.name)
    post_report(agent, node.name, make_report("a100-80gb-mig", node_name=node.name), token)
    kinds = [problem["kind"] for problem in NodeReportState.objects.get(node=node).mig_detail["problems"]]
    assert kinds == ["mig_manager_failed", "profiles"]


def test_a_mig_mode_change_waiting_for_a_reset_is_flagged(world: World, issue_token: IssueToken, agent: APIClient) -> None:
    node = add_node(world.cluster, "gpu-a100-11")
    _, token = issue_token(node.name)
    report = make_report("a100-80gb-mig", node_name=node.name, sequence=1)
    report["gpus"][0]["mig_mode"] = {"current": "enabled", "pending": "disabled"}
    post_report(agent, node.name, report, token)
    state = NodeReportState.objects.get(node=node)
    assert state.mig_reset_pending and state.mig_detail["reset_pending"] == [0]
    assert _events("node.mig_mismatch_flagged", node)[0].details == {"flag": "reset_pending"}
    post_report(agent, node.name, make_report("a100-80gb-mig", node_name=node.name, sequence=2), token)
    assert not NodeReportState.objects.get(node=node).mig_reset_pending
    assert _events("node.mig_mismatch_cleared", node)[0].details == {"flag": "reset_pending"}


def test_the_comparison_takes_a_renderer_layout_as_well() -> None:
    entries = [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 1, "2g.20gb": 2}},
        {"devices": [1, 2], "mig-enabled": True, "mig-devices": {}},
        {"device-filter": ["0x233010DE"], "devices": "all", "mig-enabled": False},
    ]
    planned = mig.planned_per_gpu(entries, [0, 1, 2, 3])
    observed = [
        mig.ObservedGpuMig(index=0, mig_capable=True, current="enabled", pending="enabled",
                           profiles=("2g.20gb", "3g.40gb", "2g.20gb")),
        mig.ObservedGpuMig(index=1, mig_capable=True, current="enabled", pending="enabled"),
        mig.ObservedGpuMig(index=2, mig_capable=None),
        mig.ObservedGpuMig(index=3, mig_capable=True, current="disabled", pending="disabled"),
    ]  # fmt: skip
    result = mig.mig_layout_compare(planned=planned, observed=observed)
    assert not result.mismatch and result.unverifiable == (2,) and 3 not in planned
    result = mig.mig_layout_compare(planned=planned, observed=observed[1:])
    assert [problem.kind for problem in result.problems] == ["missing_gpu"]
    not_capable = [mig.ObservedGpuMig(index=0, mig_capable=False)]
    assert mig.mig_layout_compare(planned=planned, observed=not_capable).problems[0].kind == "not_mig_capable"
    unread = [mig.ObservedGpuMig(index=0, mig_capable=True, current="enabled", pending="enabled", profiles=(None,))]
    assert mig.mig_layout_compare(planned={0: planned[0]}, observed=unread).unverifiable == (0,)


def test_well_known_config_names() -> None:
    assert mig.entries_from_label("all-disabled", gpu_model="NVIDIA A100-SXM4-80GB") == [
        {"devices": "all", "mig-enabled": False}
    ]
    assert mig.entries_from_label("all-3g.71gb", gpu_model="NVIDIA H200")[0]["mig-devices"] == {"3g.71gb": 2}  # type: ignore[index]
    assert mig.entries_from_label("all-3g.71gb", gpu_model="NVIDIA A100-SXM4-80GB") is None
    assert mig.entries_from_label("all-balanced", gpu_model="NVIDIA A100-SXM4-80GB") is None


# -------------------------------------------------------------------------------- staleness


def _ingest(node: Node, token: NodeToken, *, sequence: int, received_at: datetime.datetime, interval: int = 30) -> None:
    report = make_report("h200-8gpu-node", node_name=node.name, sequence=sequence, interval=interval)
    node_report_ingest(token=token, node_name=node.name, report=report, received_at=received_at)  # type: ignore[arg-type]


def test_a_node_goes_stale_after_three_intervals_and_at_least_90_seconds(
    world: World, h200_node: Node, issue_token: IssueToken
) -> None:
    token, _ = issue_token(h200_node.name)
    received = timezone.now() - datetime.timedelta(hours=1)
    _ingest(h200_node, token, sequence=1, received_at=received, interval=10)
    assert nodes_mark_stale(now=received + datetime.timedelta(seconds=89)) == 0  # 3 × 10 s < 90 s
    assert nodes_mark_stale(now=received + datetime.timedelta(seconds=90)) == 1
    state = NodeReportState.objects.get(node=h200_node)
    assert state.is_stale and state.stale_since == received + datetime.timedelta(seconds=90)
    event = _events("node.reports_stale", h200_node)[0]
    assert event.details["interval_seconds"] == 10
    assert nodes_mark_stale(now=received + datetime.timedelta(hours=1)) == 0  # flagged once

    _ingest(h200_node, token, sequence=2, received_at=received + datetime.timedelta(minutes=5), interval=60)
    state.refresh_from_db()
    assert not state.is_stale and state.stale_since is None
    assert len(_events("node.reports_resumed", h200_node)) == 1
    later = received + datetime.timedelta(minutes=5)
    assert nodes_mark_stale(now=later + datetime.timedelta(seconds=179)) == 0  # 3 × 60 s
    assert nodes_mark_stale(now=later + datetime.timedelta(seconds=180)) == 1


def test_a_stale_node_accepts_a_report_its_clock_calls_older(world: World, h200_node: Node, issue_token: IssueToken) -> None:
    token, _ = issue_token(h200_node.name)
    now = timezone.now()
    _ingest(h200_node, token, sequence=50, received_at=now - datetime.timedelta(minutes=10))
    _ingest(h200_node, token, sequence=3, received_at=now)
    assert NodeReportState.objects.get(node=h200_node).sequence == 3


def test_the_read_api_shows_fresh_stale_and_never(
    world: World, h200_node: Node, issue_token: IssueToken, agent: APIClient
) -> None:
    quiet = add_node(world.cluster, "gpu-quiet", gpus=8, model=H200)
    silent = add_node(world.cluster, "gpu-silent", gpus=8, model=H200)
    token, text = issue_token(h200_node.name)
    quiet_token, _ = issue_token(quiet.name)
    post_report(agent, h200_node.name, make_report("h200-8gpu-node", node_name=h200_node.name), text)
    _ingest(quiet, quiet_token, sequence=1, received_at=timezone.now() - datetime.timedelta(minutes=3))

    client = world.client("vision_member")
    listed = client.get("/api/v1/telemetry/nodes/", {"cluster": world.cluster.pk}).json()["results"]
    reporting = {node["name"]: node["reporting"] for node in listed}
    assert reporting[h200_node.name] == "fresh" and reporting[quiet.name] == "stale" and reporting[silent.name] == "never"
    fresh = next(node for node in listed if node["name"] == h200_node.name)
    assert len(fresh["gpus"]) == 8 and fresh["gpus"][0]["utilization"] is not None
    assert fresh["report"]["interval_seconds"] == 30
    stale_names = {node["name"] for node in client.get("/api/v1/telemetry/nodes/", {"stale": "true"}).json()["results"]}
    assert {quiet.name, silent.name} <= stale_names and h200_node.name not in stale_names
    fresh_names = {node["name"] for node in client.get("/api/v1/telemetry/nodes/", {"stale": "false"}).json()["results"]}
    assert fresh_names == {h200_node.name}


# ------------------------------------------------------------------------------ read access


def test_observed_state_follows_the_inventorys_visibility(
    world: World, h200_node: Node, issue_token: IssueToken, agent: APIClient
) -> None:
    _, token = issue_token(h200_node.name)
    post_report(agent, h200_node.name, make_report("h200-8gpu-node", node_name=h200_node.name), token)
    gpu = ObservedGpu.objects.filter(node=h200_node).first()
    assert gpu is not None
    nobody = world.client("nobody")
    assert nobody.get("/api/v1/telemetry/nodes/").json()["results"] == []
    assert nobody.get(f"/api/v1/telemetry/nodes/{h200_node.pk}/").status_code == 404
    assert nobody.get(f"/api/v1/telemetry/gpus/{gpu.pk}/samples/").status_code == 404
    assert world.client(None).get("/api/v1/telemetry/nodes/").status_code == 401
    member = world.client("nlp_member")
    detail = member.get(f"/api/v1/telemetry/nodes/{h200_node.pk}/").json()
    assert detail["reporting"] == "fresh" and len(detail["gpus"]) == 8
    assert detail["gpus"][0]["inventory_gpu_id"] == Gpu.objects.get(node=h200_node, index=0).pk
    assert detail["report"]["driver_version"]
    samples = member.get(f"/api/v1/telemetry/gpus/{gpu.pk}/samples/", {"tier": "raw", "since": "2026-01-01T00:00:00Z"}).json()["results"]
    assert len(samples) == 1 and samples[0]["gpu_percent"] == gpu.gpu_percent

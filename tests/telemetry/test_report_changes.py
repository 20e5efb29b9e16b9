"""The ingest's decisions without a database: ``changes.report_changes`` from stored values and a
recorded report to a change set (pytest-django refuses any query in these tests)."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from agent.report import AgentReport
from telemetry.ingest.changes import inventory_relinks, report_changes, report_out_of_order
from telemetry.ingest.changeset import ChangeSet
from telemetry.ingest.stored import (
    InventoryGpu,
    MigDevice,
    PlannedMig,
    StoredGpu,
    StoredNode,
    StoredReportState,
)
from tests.telemetry.fixtures import STARTED, make_report

NODE_ID = 7
TOKEN_ID = 3
STALE_AFTER = datetime.timedelta(seconds=90)
NO_PLAN = PlannedMig(entries=None, config_state="")


def _received(sequence: int) -> datetime.datetime:
    return STARTED + datetime.timedelta(seconds=30 * sequence + 1)


def _report(recording: str, sequence: int) -> Any:
    return make_report(recording, node_name="node", sequence=sequence)


def _never_reported() -> StoredNode:
    state = StoredReportState(
        node_id=NODE_ID, agent_started_at=None, sequence=None, stale_at=None, stale_on_receipt=True, is_stale=False,
        stale_since=None, mig_mismatch=False, mig_reset_pending=False, mig_detail={}, unidentified_gpus=[],
        reports_accepted=0,
    )  # fmt: skip
    return StoredNode(state=state, gpus=(), mig_devices={}, planned_mig=NO_PLAN)


def _changes(stored: StoredNode, report: Any, sequence: int) -> ChangeSet:
    return report_changes(stored, report, token_id=TOKEN_ID, received_at=_received(sequence), stale_after=STALE_AFTER)


def _written(stored: StoredNode, changes: ChangeSet) -> StoredNode:
    """What the load step would read after the change set was written: created GPUs get primary
    keys and (as ``node_gpus_observe`` would) an inventory row matching the report."""
    pks = dict(changes.rows.stored_pks)
    for offset, created in enumerate(changes.rows.gpus_created, start=len(pks) + 100):
        pks[created.uuid] = offset
    specs = {spec.uuid: spec for spec in changes.rows.inventory.specs} if changes.rows.inventory else {}
    fields = {gpu.uuid: gpu.fields for gpu in stored.gpus}
    fields.update({item.uuid: item.fields for item in changes.rows.gpus_created})
    fields.update({item.uuid: item.fields for item in changes.rows.gpus_updated})
    gpus = []
    for uuid, pk in pks.items():
        spec = specs.get(uuid)
        old = next((gpu for gpu in stored.gpus if gpu.uuid == uuid), None)
        inventory = old.inventory if old is not None else None
        if spec is not None:
            inventory = InventoryGpu(pk=pk + 1000, uuid=uuid, index=spec.index, model=spec.model or "unknown",
                                     memory_mib=spec.memory_mib or 0, mig_capable=bool(spec.mig_capable))  # fmt: skip
        link = inventory.pk if inventory is not None else None
        gpus.append(StoredGpu(pk=pk, uuid=uuid, fields=dataclasses.replace(fields[uuid], gpu_id=link), inventory=inventory))
    devices: dict[int, list[MigDevice]] = {pk: list(found) for pk, found in stored.mig_devices.items()}
    for pk in changes.rows.mig_replaced_on:
        devices.pop(pk)
    for number, item in enumerate(changes.rows.mig_created, start=500):
        devices.setdefault(pks[item.gpu_uuid], []).append(dataclasses.replace(item.device, pk=number))
    new = changes.node.state
    state = StoredReportState(
        node_id=NODE_ID, agent_started_at=new.agent_started_at, sequence=new.sequence, stale_at=new.stale_at,
        stale_on_receipt=False, is_stale=new.is_stale, stale_since=new.stale_since, mig_mismatch=new.mig_mismatch,
        mig_reset_pending=new.mig_reset_pending, mig_detail=new.mig_detail, unidentified_gpus=new.unidentified_gpus,
        reports_accepted=new.reports_accepted,
    )  # fmt: skip
    by_slot = {pk: tuple(sorted(found, key=lambda device: device.slot)) for pk, found in devices.items()}
    return StoredNode(state=state, gpus=tuple(gpus), mig_devices=by_slot, planned_mig=stored.planned_mig)


def test_a_first_report_creates_every_gpu_observes_the_inventory_and_is_audited() -> None:
    report = _report("h200-8gpu-node", 1)
    changes = _changes(_never_reported(), report, 1)
    rows = changes.rows
    assert [item.uuid for item in rows.gpus_created] == [gpu["uuid"] for gpu in report["gpus"]]
    assert rows.gpus_updated == () and rows.mig_replaced_on == () and rows.mig_created == ()
    assert [sample.gpu_uuid for sample in rows.samples] == [gpu["uuid"] for gpu in report["gpus"]]
    assert all(sample.at == datetime.datetime.fromisoformat(report["collected_at"]) for sample in rows.samples)
    assert rows.inventory is not None and len(rows.inventory.specs) == 8
    assert rows.inventory.specs[0].model == "NVIDIA-H200" and rows.inventory.specs[0].mig_capable is True
    assert all(link is None for _, link in rows.inventory.links)
    observed = changes.node.audit_events[0]
    assert observed.action.code == "node.gpus_observed" and observed.target_node_id == NODE_ID
    assert [item["index"] for item in observed.details["appeared"]] == list(range(8))
    assert observed.details["absent"] == [] and observed.details["returned"] == []
    state = changes.node.state
    assert (state.token_id, state.sequence, state.reports_accepted, state.is_stale) == (TOKEN_ID, 1, 1, False)
    assert state.stale_at == _received(1) + STALE_AFTER


def test_an_unchanged_report_writes_readings_and_samples_only() -> None:
    stored = _written(_never_reported(), _changes(_never_reported(), _report("h200-8gpu-node", 1), 1))
    report = _report("h200-8gpu-node", 2)
    report["gpus"][4]["memory_used_bytes"] = 1234
    changes = _changes(stored, report, 2)
    rows = changes.rows
    assert rows.gpus_created == () and rows.inventory is None and not rows.gpu_state_changed
    assert [item.pk for item in rows.gpus_updated] == [stored.gpus[i].pk for i in range(8)]
    assert rows.gpus_updated[4].fields.memory_used_bytes == 1234
    assert rows.gpus_updated[4].fields.gpu_id == stored.gpus[4].fields.gpu_id  # the inventory link stays
    assert len(rows.samples) == 8 and rows.samples[4].memory_used_bytes == 1234
    assert changes.node.audit_events == ()
    assert changes.node.state.reports_accepted == 2


def test_a_gpu_missing_from_a_report_goes_absent_and_is_audited_once() -> None:
    stored = _written(_never_reported(), _changes(_never_reported(), _report("h200-8gpu-node", 1), 1))
    report = _report("h200-8gpu-node", 2)
    missing = report["gpus"].pop(6)
    changes = _changes(stored, report, 2)
    gone = [item for item in changes.rows.gpus_updated if not item.fields.is_present]
    assert [item.uuid for item in gone] == [missing["uuid"]]
    assert gone[0].fields.absent_since == _received(2) and changes.rows.gpu_state_changed
    assert len(changes.rows.samples) == 7
    [event] = changes.node.audit_events
    assert event.action.code == "node.gpus_observed"
    assert event.details["absent"] == [{"uuid": missing["uuid"], "index": 6}]

    blind = _report("h200-8gpu-node", 2)
    blind["gpus"] = []
    blind["errors"] = [{"call": "nvmlDeviceGetCount", "field": "gpus", "error": "NVMLError_Unknown", "code": 999,
                        "message": "Unknown Error"}]  # fmt: skip
    unchanged = _changes(stored, blind, 2)
    assert unchanged.rows.gpus_updated == ()  # a failed count says nothing about presence
    assert "node.gpus_observed" not in [event.action.code for event in unchanged.node.audit_events]


def test_a_changed_mig_layout_replaces_the_devices_and_memory_alone_updates_them() -> None:
    first = _changes(_never_reported(), _report("a100-80gb-mig", 1), 1)
    assert [item.device.profile for item in first.rows.mig_created] == ["3g.40gb", "2g.20gb", "2g.20gb"]
    stored = _written(_never_reported(), first)
    [gpu] = stored.gpus

    busier = _report("a100-80gb-mig", 2)
    busier["gpus"][0]["mig_instances"][1]["memory_used_bytes"] = 2**30
    changes = _changes(stored, busier, 2)
    assert changes.rows.mig_replaced_on == () and changes.rows.mig_created == ()
    slot = busier["gpus"][0]["mig_instances"][1]["index"]
    [update] = changes.rows.mig_memory_updates
    assert update.memory_used_bytes == 2**30 and update.pk == next(d.pk for d in stored.mig_devices[gpu.pk] if d.slot == slot)

    smaller = _report("a100-80gb-mig", 2)
    smaller["gpus"][0]["mig_instances"].pop()
    changes = _changes(stored, smaller, 2)
    assert changes.rows.mig_replaced_on == (gpu.pk,) and len(changes.rows.mig_created) == 2
    assert changes.rows.mig_memory_updates == ()


def test_a_mig_mismatch_is_flagged_against_the_plan_and_a_stale_node_resumes() -> None:
    plan = PlannedMig(entries=[{"devices": "all", "mig-enabled": False}], config_state="success")
    stale = dataclasses.replace(
        _never_reported(), planned_mig=plan,
        state=dataclasses.replace(_never_reported().state, is_stale=True, stale_since=STARTED),
    )  # fmt: skip
    changes = _changes(stale, _report("a100-80gb-mig", 1), 1)
    actions = [event.action.code for event in changes.node.audit_events]
    assert actions == ["node.gpus_observed", "node.mig_mismatch_flagged", "node.reports_resumed"]
    flagged = changes.node.audit_events[1]
    assert flagged.details == {"flag": "mig_layout"} and flagged.before == {"mig_layout": False, "detail": {}}
    assert changes.node.state.mig_mismatch and changes.node.state.mig_detail["plan"] == "compared"
    assert changes.node.audit_events[2].details == {"stale_since": STARTED.isoformat()}


def test_samples_are_never_later_than_receipt_and_an_unidentified_gpu_keeps_its_row() -> None:
    stored = _written(_never_reported(), _changes(_never_reported(), _report("h200-8gpu-node", 1), 1))
    report = _report("h200-8gpu-node", 2)
    report["collected_at"] = (_received(2) + datetime.timedelta(minutes=5)).isoformat()  # the agent's clock runs ahead
    report["gpus"][3]["uuid"] = None
    changes = _changes(stored, report, 2)
    assert {sample.at for sample in changes.rows.samples} == {_received(2)}
    assert stored.gpus[3].uuid not in {item.uuid for item in changes.rows.gpus_updated}
    [event] = changes.node.audit_events
    assert event.after == {"unidentified": [3]} and event.details["absent"] == []


def test_out_of_order_reports_and_inventory_relinks() -> None:
    stored = _written(_never_reported(), _changes(_never_reported(), _report("h200-8gpu-node", 2), 2)).state
    older: AgentReport = _report("h200-8gpu-node", 1)
    assert report_out_of_order(stored, older)
    assert not report_out_of_order(dataclasses.replace(stored, stale_on_receipt=True), older)
    assert not report_out_of_order(stored, _report("h200-8gpu-node", 3))
    links = [("a", 1), ("b", 2), ("c", None)]
    assert inventory_relinks(links, {"a": 1, "c": 2}) == [("b", None), ("c", 2)]

"""What one report says about custody, read without the database: its time on the portal's clock,
the devices each container holds, and whether custody is known at all.

The agent's ``clock_offset_seconds`` is its clock minus the portal's, so the portal's time of a
report is ``collected_at - offset``; a report with no offset keeps the agent's time and says so
(``clock_known``), which lowers the confidence of what it opens or closes.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from custody.models import GapCause


@dataclass(frozen=True)
class Holder:
    """One container holding one device: the key of an open interval on a node."""

    device_id: str
    namespace: str
    pod: str
    pod_uid: str
    container: str


@dataclass(frozen=True)
class HeldDevice:
    holder: Holder
    gpu_uuid: str
    resource: str
    sharing: str


@dataclass(frozen=True)
class ReportView:
    agent_started_at: datetime.datetime
    sequence: int
    at: datetime.datetime  # the portal's time of the report
    interval_seconds: int
    clock_offset_seconds: float | None
    held: tuple[HeldDevice, ...] | None  # None: custody unknown in this report
    unknown_cause: str  # why ``held`` is None


def parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(datetime.UTC)


def _mig_parents(report: Mapping[str, Any]) -> dict[str, str]:
    parents: dict[str, str] = {}
    for gpu in report.get("gpus") or []:
        for instance in gpu.get("mig_instances") or []:
            if instance.get("uuid") and gpu.get("uuid"):
                parents[instance["uuid"]] = gpu["uuid"]
    return parents


def gpu_of(device_id: str, mig_parents: Mapping[str, str]) -> str:
    """The physical GPU a device is on: a replica ``GPU-uuid::N`` on its GPU, a MIG device on the
    GPU whose instance it is (from the same report), a GPU on itself; unknown MIG devices: ''."""
    if "::" in device_id:
        return device_id.split("::", 1)[0]
    if device_id.startswith("MIG-"):
        return mig_parents.get(device_id, "")
    return device_id


def report_view(report: Mapping[str, Any]) -> ReportView:
    offset = report.get("clock_offset_seconds")
    collected = parse_time(str(report["collected_at"]))
    at = collected - datetime.timedelta(seconds=float(offset)) if offset is not None else collected
    held: tuple[HeldDevice, ...] | None = None
    cause = ""
    if report.get("pod_resources_error"):
        cause = GapCause.POD_RESOURCES_ERROR
    elif "pod_devices" not in report or report.get("pod_devices") is None:
        cause = GapCause.NOT_REPORTED
    else:
        parents = _mig_parents(report)
        held = tuple(
            HeldDevice(
                holder=Holder(
                    device_id=item["device_id"], namespace=item["namespace"], pod=item["pod"],
                    pod_uid=item.get("pod_uid") or "", container=item["container"],
                ),
                gpu_uuid=gpu_of(item["device_id"], parents), resource=item["resource"], sharing=item["sharing"],
            )
            for item in report["pod_devices"]
        )
    return ReportView(
        agent_started_at=parse_time(str(report["agent_started_at"])), sequence=int(report["sequence"]), at=at,
        interval_seconds=int(report["interval_seconds"]),
        clock_offset_seconds=float(offset) if offset is not None else None, held=held, unknown_cause=cause,
    )

"""Two days of GPU custody for the demo's grants, so that the auditor's custody page and API
answer on ``make run``: each booked GPU (or replica, or MIG slice) is held by a run of pods of its
grant's project, replayed as node reports through the ledger's own ingestion (``custody.ingest``),
half-hourly. The story has what an auditor looks for: an agent restart on one node (a gap), the
kubelet unreadable for an hour on another (a gap), and a debugging pod of NLP on a GPU nobody
granted it, for two hours yesterday (an alarm raised and cleared in the audit log).

Deterministic (names and times from the grants and the clock) and additive: nothing happens when
the ledger already holds a row of a demo node. The demo GPUs get UUIDs derived from their names
where they have none (the agents would have reported them).
"""

from __future__ import annotations

import datetime
import uuid
import zlib
from typing import Any

from django.db import transaction

from allocations.models import Reservation
from clusters.models import Cluster, Gpu, Node
from custody.chain import time_text
from custody.ingest import custody_report_apply
from custody.models import CustodyEvent
from kernel.clock import clock_at, clock_now

STEP = datetime.timedelta(minutes=30)
SPAN = datetime.timedelta(days=2)
RESTARTED = "h100-node-1"  # its agent restarts halfway
UNREADABLE = "h100-node-3"  # its kubelet's PodResources is unreadable for an hour
SHARING = {"exclusive": "exclusive", "mig": "mig", "mps": "mps", "timeslice": "time-sliced"}


def _gpu_uuids(cluster: Cluster) -> dict[tuple[int, int], str]:
    uuids: dict[tuple[int, int], str] = {}
    for gpu in Gpu.objects.filter(node__cluster=cluster).select_related("node"):
        if not gpu.uuid:
            gpu.uuid = "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{gpu.node.name}.{gpu.index}.demo"))
            gpu.save(update_fields=["uuid"])
        uuids[(gpu.node_id, gpu.index)] = gpu.uuid
    return uuids


def _running(key: str, moment: datetime.datetime) -> tuple[bool, int]:
    """Whether a job of this booking runs at ``moment``, and which: six-hour jobs with an hour
    between them, each booking's rhythm offset by its name."""
    offset = zlib.crc32(key.encode()) % 7
    hours = int(moment.timestamp() // 3600) + offset
    return hours % 7 != 0, hours // 7 % 1000


def _devices(reservation: Reservation, uuids: dict[tuple[int, int], str], moment: datetime.datetime) -> list[dict[str, Any]]:
    allocation = reservation.allocation
    key = f"{allocation.project.slug}-{allocation.pk}-{reservation.unit}"
    running, job = _running(key, moment)
    if not running:
        return []
    devices = []
    for index in reservation.gpu_indices:
        gpu, sharing = uuids[(reservation.node_id, index)], SHARING.get(reservation.node.sharing, "exclusive")
        if reservation.mig_profile:
            sharing, device = "mig", _mig_device(gpu, reservation)
        elif sharing in ("mps", "time-sliced"):
            device = f"{gpu}::{reservation.unit}"
        else:  # a whole GPU, on a node whose other GPUs may be partitioned
            sharing, device = "exclusive", gpu
        pod = f"{allocation.flavor.name}-job-{job}-u{reservation.unit}"
        devices.append({"namespace": allocation.project.slug, "pod": pod, "pod_uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{key}.{job}")),
                        "container": "main", "resource": allocation.flavor.resource_name, "device_id": device,
                        "sharing": sharing})  # fmt: skip
    return devices


def _report(node: Node, moment: datetime.datetime, started: datetime.datetime, sequence: int,
            devices: list[dict[str, Any]], gpus: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    report: dict[str, Any] = {
        "agent_started_at": time_text(started), "sequence": sequence, "collected_at": time_text(moment),
        "interval_seconds": int(STEP.total_seconds()), "clock_offset_seconds": 0.0, "gpus": gpus,
        "pod_resources_error": None, "pod_devices": devices,
    }
    if node.name == UNREADABLE and datetime.timedelta(hours=20) <= (moment - started) < datetime.timedelta(hours=21):
        report.update(pod_devices=None, pod_resources_error="kubelet pod-resources socket: connection refused")
    return report


def _node_replay(node: Node, uuids: dict[tuple[int, int], str], start: datetime.datetime, now: datetime.datetime) -> None:
    bookings = list(Reservation.objects.filter(node=node).select_related("allocation__project", "allocation__flavor", "node"))
    started, sequence, moment, restarted = start - STEP, 0, start, False
    while moment <= now:
        if node.name == RESTARTED and not restarted and start + SPAN / 2 <= moment:
            started, sequence, restarted = moment - datetime.timedelta(minutes=2), 0, True  # the agent restarted
        sequence += 1
        live = [r for r in bookings if r.created_at <= moment and (r.released_at is None or r.released_at > moment)
                and r.allocation.starts_at <= moment]  # fmt: skip
        devices = [device for reservation in live for device in _devices(reservation, uuids, moment)]
        if node.name == "h100-node-5" and start + datetime.timedelta(hours=26) <= moment < start + datetime.timedelta(hours=28):
            free = [i for i in range(8) if not any(i in r.gpu_indices for r in live)]
            if free:
                devices.append({"namespace": "nlp-llm", "pod": "debug-shell", "pod_uid": None, "container": "shell",
                                "resource": "nvidia.com/gpu", "device_id": uuids[(node.pk, free[0])], "sharing": "exclusive"})  # fmt: skip
        gpus = _gpus(node, uuids, live)
        with clock_at(moment):
            custody_report_apply(node=node, report=_report(node, moment, started, sequence, devices, gpus), received_at=moment)
        moment += STEP


def _mig_device(gpu: str, reservation: Reservation) -> str:
    return f"MIG-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{gpu}.{reservation.mig_start}')}"


def _gpus(node: Node, uuids: dict[tuple[int, int], str], live: list[Reservation]) -> list[dict[str, Any]]:
    """The report's GPUs with their MIG devices (what maps a MIG device to its GPU)."""
    instances: dict[int, list[dict[str, Any]]] = {index: [] for index in range(8)}
    for reservation in live:
        if reservation.mig_profile:
            for index in reservation.gpu_indices:
                instances[index].append({"uuid": _mig_device(uuids[(node.pk, index)], reservation)})
    return [{"uuid": uuids[(node.pk, index)], "mig_instances": instances[index]} for index in range(8)]


@transaction.atomic
def demo_custody_seed(*, now: datetime.datetime | None = None) -> None:
    cluster = Cluster.objects.filter(name="demo").first()
    if cluster is None:
        return
    nodes = list(Node.objects.filter(cluster=cluster).select_related("cluster").order_by("name"))
    if CustodyEvent.objects.filter(node_id__in=[node.pk for node in nodes]).exists():
        return
    end = (now or clock_now()).replace(second=0, microsecond=0)
    start = end - SPAN
    uuids = _gpu_uuids(cluster)
    for node in nodes:
        _node_replay(node, uuids, start, end)

"""Mismatch alarms: raised and cleared in the transaction of the report (or the silence) that
shows them, each an audit event; while raised, a row of ``CustodyAlarm`` (what ``/metrics`` counts
and the PrometheusRule alerts on, docs/custody.md)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from audit import actions
from audit.services import audit_record
from clusters.models import Node
from custody.attribution import NodeBookings
from custody.models import AlarmKind, Attribution, CustodyAlarm, CustodyHolding

HOLDING_ALARMS: dict[str, str] = {Attribution.UNGRANTED: AlarmKind.UNGRANTED, Attribution.FOREIGN: AlarmKind.FOREIGN}


@dataclass(frozen=True)
class Wanted:
    """An alarm that the report shows holds now."""

    kind: str
    key: str
    allocation_id: int | None
    department_id: int | None
    details: dict[str, Any]


def holding_key(holding: CustodyHolding) -> str:
    return f"{holding.node_id}/{holding.device_id}/{holding.namespace}/{holding.pod}/{holding.container}"


def wanted_alarms(
    *, node_id: int, holdings: Iterable[CustodyHolding], bookings: NodeBookings, booked_before: datetime.datetime | None
) -> list[Wanted]:
    """Within one report: each held device with no grant, or on another project's GPU; each grant
    booked on the node before the previous report whose GPUs none of its project's pods hold."""
    wanted: list[Wanted] = []
    held_by: set[int] = set()
    for holding in holdings:
        if holding.allocation_id is not None:
            held_by.add(holding.allocation_id)
        kind = HOLDING_ALARMS.get(holding.attribution)
        if kind is None:
            continue
        booked = sorted({b.allocation_id for b in bookings.on_gpu(holding.gpu_uuid)})
        wanted.append(Wanted(kind, holding_key(holding), None, holding.department_id, {
            "device_id": holding.device_id, "gpu_uuid": holding.gpu_uuid, "namespace": holding.namespace,
            "pod": holding.pod, "pod_uid": holding.pod_uid, "container": holding.container,
            "booked_to_allocations": booked, "since": holding.started_at.isoformat(),
        }))  # fmt: skip
    for booking in bookings.bookings:
        if booking.allocation_id in held_by or booked_before is None or booking.booked_at >= booked_before:
            continue
        wanted.append(Wanted(AlarmKind.UNUSED, f"{booking.allocation_id}@{node_id}", booking.allocation_id,
                             booking.department_id, {"gpu_indices": sorted(booking.gpu_indices)}))  # fmt: skip
    return wanted


def alarms_settle(*, node: Node, wanted: list[Wanted], kinds: Iterable[str], at: datetime.datetime) -> None:
    """Raise what is wanted and not raised; clear what is raised on this node (of ``kinds``) and
    no longer wanted."""
    kinds = tuple(kinds)
    raised = {(alarm.kind, alarm.key): alarm for alarm in CustodyAlarm.objects.filter(node=node, kind__in=kinds)}
    wanted_keys = {(want.kind, want.key) for want in wanted}
    for want in wanted:
        if (want.kind, want.key) not in raised:
            alarm_raise(node=node, want=want, at=at)
    for key, alarm in raised.items():
        if key not in wanted_keys:
            alarm_clear(alarm=alarm, node=node, at=at)


def alarm_raise(*, node: Node, want: Wanted, at: datetime.datetime) -> None:
    alarm, created = CustodyAlarm.objects.get_or_create(
        kind=want.kind, key=want.key,
        defaults={"node": node, "allocation_id": want.allocation_id, "department_id": want.department_id, "raised_at": at},
    )  # fmt: skip
    if created:
        audit_record(
            actor=None, action=actions.CUSTODY_ALARM_RAISED, target=node, department_id=want.department_id,
            after={"alarm": want.kind, "key": want.key}, details={**want.details, "allocation_id": want.allocation_id,
                                                                   "at": at.isoformat()},
        )  # fmt: skip


def alarm_clear(*, alarm: CustodyAlarm, node: Node, at: datetime.datetime) -> None:
    audit_record(
        actor=None, action=actions.CUSTODY_ALARM_CLEARED, target=node, department_id=alarm.department_id,
        before={"alarm": alarm.kind, "key": alarm.key},
        details={"raised_at": alarm.raised_at.isoformat(), "at": at.isoformat(), "allocation_id": alarm.allocation_id},
    )
    alarm.delete()

"""The auditor's questions, read from the ledger: who held a device between two times, which
devices a pod held, what a grant's pods held; each answer with the gaps of the nodes it involves
(when custody there was unknown), so that an absence of rows is never mistaken for an absence of use.

Every filter leads an index of ``custody.schema``: the rows read are one device's (one pod's, one
grant's), whatever the size of the whole history.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet

from custody.chain import LEDGER_FIELDS
from custody.models import CustodyEvent, CustodyHolding, CustodyNodeState, EventKind

ROW_LIMIT = 10_000


@dataclass(frozen=True)
class CustodyQuery:
    device: str = ""
    pod: str = ""
    allocation_id: int | None = None
    time_from: datetime.datetime | None = None
    time_to: datetime.datetime | None = None
    department_ids: frozenset[int] | None = None  # None: every department and unattributed rows


def _subject(query: CustodyQuery) -> Q:
    subject = Q()
    if query.device:
        by_device = "::" in query.device or query.device.startswith("MIG-")
        subject &= Q(device_id=query.device) if by_device else Q(gpu_uuid=query.device)
    if query.pod:
        namespace, _, name = query.pod.partition("/")
        subject &= Q(namespace=namespace, pod=name) if name else Q(pod_uid=query.pod)
    if query.allocation_id is not None:
        subject &= Q(allocation_id=query.allocation_id)
    if query.department_ids is not None:
        subject &= Q(department_id__in=query.department_ids)
    return subject


def _overlap(query: CustodyQuery, *, open_ended: bool) -> Q:
    window = Q()
    if query.time_to is not None:
        window &= Q(started_at__lte=query.time_to)
    if query.time_from is not None and not open_ended:
        window &= Q(ended_at__gte=query.time_from)
    return window


def closed_intervals(*, query: CustodyQuery) -> QuerySet[CustodyEvent]:
    return CustodyEvent.objects.filter(_subject(query), _overlap(query, open_ended=False), kind=EventKind.CLOSED)


def open_intervals(*, query: CustodyQuery) -> QuerySet[CustodyHolding]:
    return CustodyHolding.objects.filter(_subject(query), _overlap(query, open_ended=True)).select_related("node__cluster")


def node_gaps(*, node_ids: set[int], query: CustodyQuery) -> QuerySet[CustodyEvent]:
    return CustodyEvent.objects.filter(_overlap(query, open_ended=False), kind=EventKind.GAP, node_id__in=node_ids)


def _event_row(event: CustodyEvent, *, state: str) -> dict[str, Any]:
    row = {field: getattr(event, field) for field in LEDGER_FIELDS}
    return {**row, "state": state, "hash": event.hash, "last_seen_at": None}


def _holding_row(holding: CustodyHolding, *, last_seen: datetime.datetime | None) -> dict[str, Any]:
    row: dict[str, Any] = {field: None for field in LEDGER_FIELDS}
    row.update(
        node_id=holding.node_id, chain_seq=holding.opened_seq, kind=EventKind.OPENED, cluster=holding.node.cluster.name,
        node=holding.node.name, gpu_uuid=holding.gpu_uuid, device_id=holding.device_id, resource=holding.resource,
        sharing=holding.sharing, namespace=holding.namespace, pod=holding.pod, pod_uid=holding.pod_uid,
        container=holding.container, project_id=holding.project_id, department_id=holding.department_id,
        allocation_id=holding.allocation_id, attribution=holding.attribution, started_at=holding.started_at,
        start_observed=holding.start_observed, end_observed="", gap_cause="", confidence="",
    )
    return {**row, "state": "open", "hash": None, "last_seen_at": last_seen}


def custody_answer(*, query: CustodyQuery) -> tuple[list[dict[str, Any]], bool]:
    """The intervals (closed, then still open) and the gaps of their nodes, by start; and whether
    the answer was cut at ``ROW_LIMIT`` (narrow the window)."""
    closed = list(closed_intervals(query=query).order_by("started_at", "node_id", "chain_seq")[: ROW_LIMIT + 1])
    holdings = list(open_intervals(query=query).order_by("started_at", "pk")[: ROW_LIMIT + 1])
    node_ids = {event.node_id for event in closed} | {holding.node_id for holding in holdings}
    seen = dict(CustodyNodeState.objects.filter(node_id__in={h.node_id for h in holdings}).values_list("node_id", "last_report_at"))
    rows = [_event_row(event, state="closed") for event in closed]
    rows += [_holding_row(holding, last_seen=seen.get(holding.node_id)) for holding in holdings]
    rows += [_event_row(gap, state="gap") for gap in node_gaps(node_ids=node_ids, query=query)[: ROW_LIMIT + 1]]
    far_past = datetime.datetime.min.replace(tzinfo=datetime.UTC)
    rows.sort(key=lambda row: (row["started_at"] or far_past, row["node_id"], row["chain_seq"]))
    return rows[:ROW_LIMIT], len(rows) > ROW_LIMIT

"""Appending to a node's ledger chain: rows built in order, hashed onto the node's chain head,
written in one batch in the caller's transaction (the caller holds the node's lock)."""

from __future__ import annotations

import datetime
from typing import Any

from clusters.models import Node
from custody.chain import LEDGER_FIELDS, row_hash
from custody.models import (
    Confidence,
    CustodyEvent,
    CustodyHolding,
    CustodyNodeState,
    EndObserved,
    EventKind,
    StartObserved,
)

_BLANK: dict[str, Any] = {
    field: ("" if field not in {"project_id", "department_id", "allocation_id", "opened_seq", "started_at",
                                "ended_at", "gone_at"} else None)
    for field in LEDGER_FIELDS
}  # fmt: skip


def confidence_of(*, start_observed: str, end_observed: str, pod_uid: str, clock_ok: bool) -> str:
    bounded = (start_observed == StartObserved.APPEARED) + (end_observed == EndObserved.GONE)
    if bounded == 0:
        return Confidence.LOW
    if bounded == 2 and pod_uid and clock_ok:
        return Confidence.HIGH
    return Confidence.MEDIUM


class LedgerAppend:
    """The rows one report adds to one node's chain."""

    def __init__(self, *, node: Node, state: CustodyNodeState, recorded_at: datetime.datetime) -> None:
        self.node = node
        self.state = state
        self.recorded_at = recorded_at
        self.rows: list[CustodyEvent] = []

    def _add(self, **fields: Any) -> int:
        seq = self.state.chain_seq + 1
        row = {**_BLANK, **fields, "node_id": self.node.pk, "chain_seq": seq, "recorded_at": self.recorded_at,
               "cluster": self.node.cluster.name, "node": self.node.name,
               "prev_hash": self.state.chain_head or "0" * 64}  # fmt: skip
        digest = row_hash(row)
        self.rows.append(CustodyEvent(**row, hash=digest))
        self.state.chain_seq, self.state.chain_head = seq, digest
        return seq

    def opened(self, holding: CustodyHolding) -> int:
        return self._add(kind=EventKind.OPENED, **_holding_fields(holding))

    def closed(self, holding: CustodyHolding, *, ended_at: datetime.datetime, end_observed: str,
               gone_at: datetime.datetime | None, clock_ok: bool) -> int:  # fmt: skip
        confidence = confidence_of(start_observed=holding.start_observed, end_observed=end_observed,
                                   pod_uid=holding.pod_uid, clock_ok=clock_ok)  # fmt: skip
        return self._add(
            kind=EventKind.CLOSED, **_holding_fields(holding), ended_at=ended_at, end_observed=end_observed,
            gone_at=gone_at, confidence=confidence, opened_seq=holding.opened_seq,
        )

    def gap(self, *, since: datetime.datetime, until: datetime.datetime, cause: str) -> int:
        return self._add(kind=EventKind.GAP, started_at=since, ended_at=until, gap_cause=cause,
                         confidence=Confidence.LOW)  # fmt: skip

    def write(self) -> None:
        if self.rows:
            CustodyEvent.objects.bulk_create(self.rows)


def _holding_fields(holding: CustodyHolding) -> dict[str, Any]:
    return {
        "gpu_uuid": holding.gpu_uuid, "device_id": holding.device_id, "resource": holding.resource,
        "sharing": holding.sharing, "namespace": holding.namespace, "pod": holding.pod, "pod_uid": holding.pod_uid,
        "container": holding.container, "project_id": holding.project_id, "department_id": holding.department_id,
        "allocation_id": holding.allocation_id, "attribution": holding.attribution, "started_at": holding.started_at,
        "start_observed": holding.start_observed,
    }

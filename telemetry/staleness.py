"""Staleness: a node whose reports stopped is flagged and audited once per silence; the next
accepted report clears the flag (``telemetry.ingest``)."""

from __future__ import annotations

import datetime

from django.db import transaction

from audit import actions
from audit.services import audit_record
from clusters.models import Node
from custody.ingest import custody_node_silenced
from kernel.clock import clock_now
from telemetry.models import NodeReportState


def nodes_mark_stale(*, now: datetime.datetime | None = None) -> int:
    """Flag (and audit) every node whose reports stopped; one short transaction per node."""
    moment = now or clock_now()
    candidates = list(
        NodeReportState.objects.filter(is_stale=False, stale_at__lte=moment).order_by("pk").values_list("pk", flat=True)
    )
    flagged = 0
    for pk in candidates:
        with transaction.atomic():
            state = NodeReportState.objects.select_for_update().filter(pk=pk, is_stale=False).first()
            if state is None or not state.is_stale_at(moment):
                continue  # a report arrived meanwhile
            state.is_stale = True
            state.stale_since = state.stale_at
            state.save(update_fields=["is_stale", "stale_since"])
            audit_record(
                actor=None,
                action=actions.NODE_REPORTS_STALE,
                target=Node(pk=pk),
                before={"stale": False},
                after={"stale": True},
                details={
                    "last_report_at": state.received_at.isoformat() if state.received_at else None,
                    "interval_seconds": state.interval_seconds,
                },
            )
            custody_node_silenced(node=Node.objects.select_related("cluster").get(pk=state.node_id), at=moment)
            flagged += 1
    return flagged

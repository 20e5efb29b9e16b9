"""Custody from one accepted report (``custody_report_apply``, called by ``telemetry.ingest`` in the
report's transaction, under its lock of the node's report state) and from a silence
(``custody_node_silenced``, called by telemetry's staleness sweep).

The rules (docs/custody.md, "Gaps"): an interval opens at the first report that shows a container
holding a device and closes at the last report that showed it; the report after says how it ended
(``gone``: it showed custody without it; ``gap``: custody was unknown). Custody is unknown across a
lost report (a sequence number skipped), a late one, an agent restart (a node reboot is one), a
report with ``pod_resources_error`` or without ``pod_devices``, and a silent node: every open
interval closes at its last sighting, a ``gap`` row says from when to when and why, and what the
next report shows opens new intervals. Nothing is carried across a gap.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from clusters.models import Node
from custody import conf
from custody.alarms import Wanted, alarms_settle, wanted_alarms
from custody.attribution import grant_for, node_bookings_read
from custody.ledger import LedgerAppend
from custody.models import AlarmKind, CustodyHolding, CustodyNodeState, EndObserved, GapCause, StartObserved
from custody.observations import HeldDevice, Holder, ReportView, report_view

REPORT_ALARMS = (AlarmKind.UNGRANTED, AlarmKind.FOREIGN, AlarmKind.UNUSED, AlarmKind.REPORTS_STOPPED)


def _key(holding: CustodyHolding) -> Holder:
    return Holder(device_id=holding.device_id, namespace=holding.namespace, pod=holding.pod,
                  pod_uid=holding.pod_uid, container=holding.container)  # fmt: skip


def gap_between(state: CustodyNodeState, view: ReportView) -> str:
    """Why custody is unknown between the node's last accepted report and this one ('' if it is not)."""
    if state.last_report_at is None or state.agent_started_at is None:
        return ""
    if view.agent_started_at != state.agent_started_at:
        return GapCause.AGENT_RESTART
    if state.sequence is not None and view.sequence != state.sequence + 1:
        return GapCause.LOST_REPORT
    if view.at - state.last_report_at > conf.gap_after(state.interval_seconds):
        return GapCause.LATE_REPORT
    return ""


def _clock_ok(offset: float | None) -> bool:
    return offset is not None and abs(offset) <= conf.clock_tolerance_seconds()


def holdings_close_for_gap(*, ledger: LedgerAppend, holdings: list[CustodyHolding], cause: str) -> None:
    """Close every open interval at its last sighting (the last accepted report) and start a gap."""
    state = ledger.state
    assert state.last_report_at is not None
    for holding in holdings:
        ledger.closed(holding, ended_at=state.last_report_at, end_observed=EndObserved.GAP, gone_at=None,
                      clock_ok=_clock_ok(state.clock_offset_seconds))  # fmt: skip
    if holdings:
        CustodyHolding.objects.filter(pk__in=[holding.pk for holding in holdings]).delete()
    state.gap_since, state.gap_cause = state.last_report_at, cause


def _open(*, ledger: LedgerAppend, held: HeldDevice, at: datetime.datetime, start: str, grant: Any) -> CustodyHolding:
    holder = held.holder
    holding = CustodyHolding(
        node=ledger.node, device_id=holder.device_id, namespace=holder.namespace, pod=holder.pod,
        pod_uid=holder.pod_uid, container=holder.container, gpu_uuid=held.gpu_uuid, resource=held.resource,
        sharing=held.sharing, project_id=grant.project_id, department_id=grant.department_id,
        allocation_id=grant.allocation_id, attribution=grant.attribution, opened_seq=0, started_at=at,
        start_observed=start,
    )
    holding.opened_seq = ledger.opened(holding)
    return holding


def _held_apply(*, ledger: LedgerAppend, view: ReportView, holdings: list[CustodyHolding], adjacent: bool) -> list[CustodyHolding]:
    """Close what this report no longer shows, open what it shows first; the intervals open now."""
    assert view.held is not None
    state = ledger.state
    shown = {held.holder: held for held in view.held}
    gone = [holding for holding in holdings if _key(holding) not in shown]
    for holding in gone:
        assert state.last_report_at is not None
        ledger.closed(holding, ended_at=state.last_report_at, end_observed=EndObserved.GONE, gone_at=view.at,
                      clock_ok=_clock_ok(view.clock_offset_seconds))  # fmt: skip
    if gone:
        CustodyHolding.objects.filter(pk__in=[holding.pk for holding in gone]).delete()
    kept = [holding for holding in holdings if _key(holding) in shown]
    known = {_key(holding) for holding in kept}
    new = [held for holder, held in shown.items() if holder not in known]
    bookings = node_bookings_read(node=ledger.node, at=view.at, namespaces={held.holder.namespace for held in view.held})
    start = StartObserved.APPEARED if adjacent else StartObserved.AFTER_GAP
    opened = [
        _open(ledger=ledger, held=held, at=view.at, start=start,
              grant=grant_for(bookings=bookings, namespace=held.holder.namespace, gpu_uuid=held.gpu_uuid))
        for held in new
    ]  # fmt: skip
    CustodyHolding.objects.bulk_create(opened)
    wanted: list[Wanted] = wanted_alarms(
        node_id=ledger.node.pk, holdings=kept + opened, bookings=bookings, booked_before=state.last_report_at if adjacent else None
    )
    alarms_settle(node=ledger.node, wanted=wanted, kinds=REPORT_ALARMS, at=view.at)
    return kept + opened


def custody_report_apply(*, node: Node, report: Mapping[str, Any], received_at: datetime.datetime) -> None:
    """Record what an accepted report says about custody, in the caller's transaction."""
    view = report_view(report)
    state, _ = CustodyNodeState.objects.select_for_update().get_or_create(node=node)
    ledger = LedgerAppend(node=node, state=state, recorded_at=received_at)
    cause = gap_between(state, view)
    holdings = list(CustodyHolding.objects.filter(node=node).order_by("pk"))
    if state.custody_known and (cause or view.held is None):
        holdings_close_for_gap(ledger=ledger, holdings=holdings, cause=cause or view.unknown_cause)
        holdings = []
    elif state.gap_since is None and view.unknown_cause == GapCause.POD_RESOURCES_ERROR:
        state.gap_since, state.gap_cause = view.at, view.unknown_cause  # custody never known yet: unknown from now
    adjacent = state.custody_known and not cause
    if view.held is not None:
        if state.gap_since is not None:
            ledger.gap(since=state.gap_since, until=view.at, cause=state.gap_cause)
            state.gap_since, state.gap_cause = None, ""
        _held_apply(ledger=ledger, view=view, holdings=holdings, adjacent=adjacent)
    else:
        alarms_settle(node=node, wanted=[], kinds=(AlarmKind.REPORTS_STOPPED,), at=view.at)  # it reports again
    state.agent_started_at, state.sequence, state.last_report_at = view.agent_started_at, view.sequence, view.at
    state.interval_seconds, state.clock_offset_seconds = view.interval_seconds, view.clock_offset_seconds
    state.custody_known = view.held is not None
    ledger.write()
    state.save()


def custody_node_silenced(*, node: Node, at: datetime.datetime) -> None:
    """The node's reports stopped: custody is unknown from its last report on; alarm once."""
    state = CustodyNodeState.objects.select_for_update().filter(node=node).first()
    if state is None or state.last_report_at is None:
        return
    ledger = LedgerAppend(node=node, state=state, recorded_at=at)
    if state.custody_known:
        holdings = list(CustodyHolding.objects.filter(node=node).order_by("pk"))
        holdings_close_for_gap(ledger=ledger, holdings=holdings, cause=GapCause.REPORTS_STOPPED)
        state.custody_known = False
    wanted = Wanted(AlarmKind.REPORTS_STOPPED, f"node {node.pk}", None, None,
                    {"last_report_at": state.last_report_at.isoformat()})  # fmt: skip
    alarms_settle(node=node, wanted=[wanted], kinds=(AlarmKind.REPORTS_STOPPED,), at=at)
    ledger.write()
    state.save()

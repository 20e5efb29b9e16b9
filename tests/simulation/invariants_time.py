"""What the timeline owes once its task completed at an instant T, what the audit log owes every
decision, and what a preview owes its approval:

* no reclaim still under way (a grant ``reclaiming``, or giving back some units) whose deadline is
  at or before T; no grant holding, or pending, whose end is; none ``scheduled`` whose start came
  and whose victims are done;
* every edge of an approved window in (T - 1 h, T] applied (the tick's look-back), and the end of a
  window cancelled in force there; no edge applied that the windows do not have;
* one audit event per decision: each allocation's request, approval, rejection, start, release and
  expiry recorded once, and once it happened; every reclaim started once and finished or called off
  once; one ``quota_window.edge`` per applied edge;
* a preview's answer (admitted, the grants it reclaims, when it starts) is what approving did.
"""

from __future__ import annotations

import datetime
import json
from collections import Counter
from typing import Any

from audit.models import AuditEvent
from tests.simulation import windows_eval
from tests.simulation.context import Context
from tests.simulation.ledger import FINAL, HOLDING, Snapshot

Found = tuple[str, str]
LOOKBACK = datetime.timedelta(hours=1)
ONCE = ("allocation.approved", "allocation.rejected", "allocation.started", "allocation.released",
        "allocation.expired", "allocation.cancelled", "allocation.requested")
EXPECTED = {"rejected": ("allocation.rejected",), "cancelled": ("allocation.cancelled",),
            "released": ("allocation.released",), "expired": ("allocation.expired",)}
RECLAIM_EVENTS = ("allocation.reclaiming", "allocation.reclaimed", "allocation.reclaim_cancelled")
ADMISSIONS = ("allocation.approved", "allocation.renewed", "allocation.change_approved")


def timeline(snap: Snapshot, tick: datetime.datetime) -> list[Found]:
    found: list[Found] = []
    for grant in snap.grants.values():
        if grant.pending_reclaim and grant.deadline is not None and grant.deadline <= tick:
            what = "reclaiming" if grant.state == "reclaiming" else f"giving back {grant.reclaim_units} units"
            found.append(("reclaim-deadline", f"#{grant.id} still {what} after the tick at {tick.isoformat()}; "
                          f"its deadline was {grant.deadline.isoformat()}"))
        elif grant.state not in FINAL and grant.ends_at <= tick:
            found.append(("expiry", f"#{grant.id} still {grant.state} after the tick at {tick.isoformat()}; it ended "
                          f"at {grant.ends_at.isoformat()}"))
        elif grant.state == "scheduled" and grant.starts_at <= tick and not snap.victims_of(grant.id):
            found.append(("start", f"#{grant.id} still scheduled after the tick at {tick.isoformat()}; it starts at "
                          f"{grant.starts_at.isoformat()} and waits for no victim"))
    return found


def window_edges(ctx: Context, prev: Snapshot, snap: Snapshot) -> list[Found]:
    found: list[Found] = []
    rows = {row.id: row for row in snap.windows}
    for tick in ctx.notes.ticks:
        for row in snap.windows:
            if row.state != "approved":
                continue
            for at, kind in windows_eval.edges(row, tick - LOOKBACK, tick):
                if (row.id, at, kind) not in snap.edges:
                    found.append(("window-edge", f"window #{row.id}: its {kind} at {at.isoformat()} was not applied by "
                                  f"the tick at {tick.isoformat()}"))
        for window_id, (at, in_force) in sorted(ctx.cancelled_at.items()):
            if in_force and tick - LOOKBACK < at <= tick and (window_id, at, "end") not in snap.edges:
                found.append(("window-edge", f"window #{window_id} was cancelled in force at {at.isoformat()}; the "
                              f"tick at {tick.isoformat()} did not apply that end"))
    for window_id, at, kind in sorted(snap.edges - prev.edges, key=lambda k: (k[1], k[0])):
        found_row = rows.get(window_id)
        cancelled = ctx.cancelled_at.get(window_id)
        expected = found_row is not None and (at, kind) in windows_eval.edges(
            found_row, at - datetime.timedelta(microseconds=1), at)
        if not expected and not (cancelled is not None and kind == "end" and cancelled[0] == at):
            found.append(("window-edge", f"window #{window_id}: an edge ({kind} at {at.isoformat()}) was applied that "
                          "the window does not have"))
    return found


def audit_events(ctx: Context) -> list[tuple[str, int, dict[str, Any]]]:
    """Count this step's audit events; return its reclaim events (action, grant, details) in order."""
    since = ctx.audit_seq
    rows = list(AuditEvent.objects.filter(seq__gt=since).order_by("seq").values_list("seq", "action", "target_id"))
    ctx.notes.admitted = {}
    for seq, action, target_id in rows:
        ctx.audit_seq = seq
        ctx.audit_counts[(action, target_id)] += 1
        if action in ADMISSIONS:
            ctx.notes.admitted[int(target_id)] = seq
    if not any(action in RECLAIM_EVENTS for _, action, _ in rows):
        return []
    records = AuditEvent.objects.filter(seq__gt=since, action__in=RECLAIM_EVENTS).order_by("seq").values_list(
        "action", "target_id", "record")
    return [(action, int(target_id), json.loads(record).get("details", {})) for action, target_id, record in records]


def audit_once(ctx: Context, prev: Snapshot, snap: Snapshot) -> list[Found]:
    found: list[Found] = []
    counts: Counter[tuple[str, str]] = ctx.audit_counts
    for grant in snap.grants.values():
        before = prev.grants.get(grant.id)
        if before is not None and before.state == grant.state and before.decided_at == grant.decided_at:
            continue
        key = str(grant.id)
        for action in ONCE:
            if counts[(action, key)] > 1:
                found.append(("audit-once", f"#{grant.id}: {counts[(action, key)]} {action} events"))
        wanted = list(EXPECTED.get(grant.state, ()))
        if before is None:
            wanted.append("allocation.requested")
        if grant.decided_at is not None and grant.state not in ("rejected", "cancelled"):
            wanted.append("allocation.approved")
        for action in wanted:
            if counts[(action, key)] != 1:
                found.append(("audit-once", f"#{grant.id} is {grant.state} with {counts[(action, key)]} {action} events"))
        started, finished, cancelled = (counts[(action, key)] for action in RECLAIM_EVENTS)
        ended = finished + cancelled + (1 if grant.pending_reclaim else 0)
        if not ended <= started <= ended + 1 or (grant.state == "reclaimed" and not finished):
            found.append(("audit-once", f"#{grant.id} ({grant.state}): {started} reclaims started, {finished} finished, "
                          f"{cancelled} called off"))
    for window_id in {key[0] for key in snap.edges - prev.edges}:
        applied = sum(1 for key in snap.edges if key[0] == window_id)
        if counts[("quota_window.edge", str(window_id))] != applied:
            found.append(("audit-once", f"window #{window_id}: {applied} edges applied, "
                          f"{counts[('quota_window.edge', str(window_id))]} quota_window.edge events"))
    return found


def previews(ctx: Context, snap: Snapshot, reclaims: list[tuple[str, int, dict[str, Any]]]) -> list[Found]:
    found: list[Found] = []
    for preview, outcome in ctx.notes.previews:
        grant = snap.grants[preview.allocation_id]
        refused = outcome in ("refused:quota_exceeded", "refused:capacity_exceeded")
        if preview.admitted and refused or not preview.admitted and outcome == "ok":
            found.append(("preview-approve", f"#{grant.id}: the preview said admitted={preview.admitted}, approving "
                          f"answered {outcome}"))
            continue
        if not (preview.admitted and outcome == "ok"):
            continue
        taken = frozenset(target for action, target, details in reclaims
                          if action == "allocation.reclaiming" and details.get("for") == grant.id)
        if taken != preview.victims:
            found.append(("preview-approve", f"#{grant.id}: the preview would reclaim {sorted(preview.victims)}, "
                          f"approving reclaimed {sorted(taken)}"))
        waits = grant.state == "scheduled"
        if (preview.starts == "now") == waits and grant.state in HOLDING:
            found.append(("preview-approve", f"#{grant.id}: the preview said it starts {preview.starts}, approving "
                          f"left it {grant.state}"))
    return found


WHY_SAYS = {"awaiting-decision": "ok", "four-eyes": "ok", "quota": "refused:quota_exceeded",
            "outside-window": "refused:quota_exceeded", "no-fit": "refused:capacity_exceeded",
            "tenancy": "refused:capacity_exceeded", "driver-minimum": "refused:capacity_exceeded"}
"""What approving does, by the primary reason why gives a pending request (docs/pending.md)."""


def why_agrees(ctx: Context) -> list[Found]:
    """The reason why gave just before an approval is the cause the approval met: fits (approved) or
    the refusal's kind. Approvals refused for another cause (a busy lock, four-eyes) say nothing."""
    found: list[Found] = []
    for allocation_id, code, outcome in ctx.notes.reasons:
        if outcome not in ("ok", "refused:quota_exceeded", "refused:capacity_exceeded"):
            continue
        if WHY_SAYS.get(code) != outcome:
            found.append(("why-approve", f"#{allocation_id}: why said {code}, approving answered {outcome}"))
    return found

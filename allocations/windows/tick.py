"""Quota windows' edges apply themselves (``docs/quotas.md``, "Quota windows").

``quota_windows_tick`` runs first in the timeline task (every 30 s, by beat or the in-process
clock) and from ``manage.py quota_windows_tick``. It applies each edge of an approved window that
fell in ``(now - lookback, now]`` and was not applied yet, in time order, each in a transaction of
its own:

* **exactly once**: the edge is a ``QuotaWindowEdge`` row (unique on window, time and kind),
  written under the row locks of the quota's department chain (``kernel.locks``) after checking
  that no tick wrote it: two ticks racing wait for each other there, and the later one finds the
  row (the unique constraint is the last guard: its ``IntegrityError`` rolls the later one back);
* it records the effective numbers just before and from the edge (audited as
  ``quota_window.edge`` with before/after); for a window of one priority class, its share's;
* when the numbers change, the cluster-wide objects are pushed to every active cluster (a
  Volcano queue's guarantee is the effective guarantee), before the audit event;
* a lower limit under shrink policy ``reclaim`` reclaims the grants holding now that the department
  holds beyond its new effective limit (chosen as ``allocations.windows.shrinks`` says), through the
  reclaim path with their notice; their ids are the edge's ``reclaimed``. Under ``wait`` nothing is
  taken: admission refuses above the new value from the edge on (it reads the windows itself, so a
  request that crosses a shrink must fit the shrunk quota whether or not the tick ran);
* **a reclaim is met eventually**: the tick holds the department chain, so it may not wait for a
  grant's row (that is the reverse of the global lock order, ``kernel.locks``: an owner renewing or
  resizing the grant holds its row and waits for the chain). It locks the grants with SKIP LOCKED,
  and when the ones in the way are being changed it takes nothing and records the edge with its
  reclaim pending (``reclaim_pending``, audited ``unmet``). Every later tick, before the edges due,
  takes up each pending reclaim in a transaction of its own under the same locks, against the
  numbers in force *then* (a shrink that is over takes nothing), until it is met: then the edge's
  ``reclaimed`` grows by what it took and ``quota_window.reclaim_met`` is audited, once (a second
  tick finds the edge no longer pending under the chain lock).

A window cancelled while in force ends when it is cancelled (``decided_at``): the tick applies
that end as an edge of its own. A late tick (the clock was down) applies the missed edges within
``lookback`` in order, each once, each reclaiming against the numbers in force *now* (so a shrink
that is over already takes nothing). Edges older than ``lookback`` are not replayed: their audit
record is missing, but admission and pushes never depended on it, and the numbers in force are
right regardless.

Then it announces the shrinks coming within 30 minutes: ``quota_window.shrink_warned`` once per
window and edge, with the grants it would hit and their owners.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction

from allocations.admission.planning import VictimInfo
from allocations.grants.reclaims import reclaims_start, victims_lock
from allocations.models import Allocation
from allocations.models.windows import QuotaWindow, QuotaWindowEdge, ShrinkPolicy, WindowState
from allocations.quotas import windows
from allocations.quotas.window_reading import approved_window_specs, window_spec
from allocations.rules.catalogue import cluster_objects_enqueue
from allocations.windows.shrinks import (
    MICROSECOND,
    WARN_WITHIN,
    ComingShrink,
    edge_numbers,
    edges_between,
    numbers,
    quota_window_shrinks_coming,
    scope_label,
    shrink_victims,
    specs_between,
    window_scope,
)
from audit import actions
from audit.models import AuditEvent
from audit.services import audit_record
from kernel.clock import clock_now
from kernel.numbers import plain
from kernel.times import minute_utc
from kernel.transactions import retry_on_deadlock
from tenants.access import department_chain

LOOKBACK = datetime.timedelta(hours=1)
VICTIM_LOCK_TRIES = 3

__all__ = ["AppliedEdge", "TickResult", "quota_window_edge_apply", "quota_window_reclaim_retry",
           "quota_window_shrinks_coming", "quota_window_shrinks_warn", "quota_windows_tick"]


@dataclass(frozen=True)
class AppliedEdge:
    window_id: int
    quota_id: int
    department: str
    scope: str
    at: datetime.datetime
    kind: str
    before: dict[str, Any]
    after: dict[str, Any]
    pushes: int = 0
    reclaimed: tuple[int, ...] = ()
    cancelled: bool = False

    def line(self) -> str:
        """One line for people: which quota, which window, the numbers before → after."""
        what = "ends (cancelled)" if self.cancelled else ("begins" if self.kind == "begin" else "ends")
        text = (
            f"{minute_utc(self.at)} window #{self.window_id} {what}: quota #{self.quota_id} ({self.department}, "
            f"{self.scope}) guaranteed {self.before['guaranteed']} → {self.after['guaranteed']}, "
            f"limit {self.before['limit']} → {self.after['limit']}"
        )
        if self.pushes:
            text += f"; pushed to {self.pushes} cluster(s)"
        if self.reclaimed:
            text += f"; reclaimed {', '.join(f'#{pk}' for pk in self.reclaimed)}"
        return text


@dataclass
class TickResult:
    applied: list[AppliedEdge] = field(default_factory=list)
    met: list[AppliedEdge] = field(default_factory=list)  # edges whose pending reclaim this tick met
    warned: int = 0


def quota_windows_tick(*, now: datetime.datetime | None = None, lookback: datetime.timedelta = LOOKBACK) -> TickResult:
    """Apply every edge due in ``(now - lookback, now]`` not applied yet, then announce the shrinks
    coming within 30 minutes; first, take up the reclaims still pending. A quiet tick reads the
    approved windows, the windows cancelled within ``lookback``, the pending edges (none, mostly:
    a partial index), and nothing else unless a shrink is coming."""
    moment = now or clock_now()
    since = moment - lookback
    specs = specs_between(since, moment + WARN_WITHIN + MICROSECOND)
    due: list[tuple[datetime.datetime, int, str, bool]] = [
        (edge.at, edge.window_id, edge.kind, False)
        for found in specs.values() for edge in edges_between(found, since + MICROSECOND, moment + MICROSECOND)
    ]
    for row in QuotaWindow.objects.filter(state=WindowState.CANCELLED, decided_at__gt=since, decided_at__lte=moment):
        assert row.decided_at is not None
        if windows.in_force(window_spec(row), row.decided_at):
            due.append((row.decided_at, row.pk, "end", True))
    result = TickResult()
    for edge_id in QuotaWindowEdge.objects.filter(reclaim_pending=True).order_by("at", "pk").values_list("pk", flat=True):
        met = quota_window_reclaim_retry(edge_id=edge_id, now=moment)
        if met is not None:
            result.met.append(met)
    if due:
        done = set(QuotaWindowEdge.objects.filter(at__gt=since, at__lte=moment).values_list("window_id", "at", "kind"))
        for at, window_id, kind, cancelled in sorted(due, key=lambda item: (item[0], item[2] != "end", item[1])):
            if (window_id, at, kind) in done:
                continue
            applied = quota_window_edge_apply(window_id=window_id, at=at, kind=kind, now=moment, cancelled=cancelled)
            if applied is not None:
                result.applied.append(applied)
    result.warned = quota_window_shrinks_warn(now=moment, specs=specs)
    return result


def quota_window_edge_apply(
    *, window_id: int, at: datetime.datetime, kind: str, now: datetime.datetime, cancelled: bool = False
) -> AppliedEdge | None:
    """Apply one edge, once: None when it was applied already (by this or a concurrent tick) or
    the window is no longer in the state the edge belongs to."""
    try:
        return _edge_apply(window_id=window_id, at=at, kind=kind, now=now, cancelled=cancelled)
    except IntegrityError:  # a concurrent tick wrote the edge first: it is applied, once
        return None


@retry_on_deadlock()
def _edge_apply(
    *, window_id: int, at: datetime.datetime, kind: str, now: datetime.datetime, cancelled: bool
) -> AppliedEdge | None:
    department_id = QuotaWindow.objects.filter(pk=window_id).values_list("quota__department_id", flat=True).first()
    if department_id is None:
        return None
    department_chain(department_id=department_id, lock=True)
    if QuotaWindowEdge.objects.filter(window_id=window_id, at=at, kind=kind).exists():
        return None
    window = QuotaWindow.objects.select_related("quota__department", "quota__flavor", "priority_class").get(pk=window_id)
    if window.state != (WindowState.CANCELLED if cancelled else WindowState.APPROVED):
        return None
    quota = window.quota
    specs = approved_window_specs(quota_ids=[quota.pk]).get(quota.pk, [])
    before, after = edge_numbers(quota=quota, specs=specs, at=at, priority_class_id=window.priority_class_id,
                                 gone=window_spec(window) if cancelled else None)
    changed = (before.guaranteed, before.limit) != (after.guaranteed, after.limit)
    victims: list[VictimInfo] = []
    rows: dict[int, Allocation] = {}
    unmet = False
    if window.shrink_policy == ShrinkPolicy.RECLAIM and after.limit < before.limit:
        victims, rows, unmet = _victims_locked(window=window, now=now)
    label = scope_label(window)
    waiting, events = reclaims_start(actor=None, victims=victims, rows=rows, now=now, window_id=window.pk,
                                     reason=_reason(window, plain(before.limit), plain(after.limit), at))
    pushes = cluster_objects_enqueue() if changed else 0  # before the events: the outbox rows' key checks
    reclaimed = [victim.allocation_id for victim in victims]
    QuotaWindowEdge.objects.create(window=window, at=at, kind=kind, before=numbers(before), after=numbers(after),
                                   reclaimed=reclaimed, reclaim_pending=unmet)
    for write in events:
        write()
    details: dict[str, Any] = {
        "at": at.isoformat(), "kind": kind, "quota": quota.pk, "scope": label, "shrink_policy": window.shrink_policy,
        "pushes": pushes, "reclaimed": reclaimed, "late_seconds": int((now - at).total_seconds()),
    }
    if cancelled:
        details["cancelled"] = True
    if waiting:
        details["notice"] = "the reclaimed grants run out their notice first"
    if unmet:
        details["unmet"] = "grants in the way are being changed right now: later ticks reclaim them"
    audit_record(actor=None, action=actions.QUOTA_WINDOW_EDGE, target=window, department_id=quota.department_id,
                 before=numbers(before), after=numbers(after), details=details)
    return AppliedEdge(window.pk, quota.pk, quota.department.slug, label, at, kind, numbers(before), numbers(after),
                       pushes, tuple(reclaimed), cancelled)


@retry_on_deadlock()
def quota_window_reclaim_retry(*, edge_id: int, now: datetime.datetime) -> AppliedEdge | None:
    """Take up the pending reclaim of one edge: None while the grants in the way are still being
    changed, or when another tick met it first; else the edge, with what it took now."""
    department_id = (QuotaWindowEdge.objects.filter(pk=edge_id)
                     .values_list("window__quota__department_id", flat=True).first())
    if department_id is None:
        return None
    department_chain(department_id=department_id, lock=True)
    edge = QuotaWindowEdge.objects.filter(pk=edge_id, reclaim_pending=True).first()
    if edge is None:  # met by a concurrent tick, which held the chain before us
        return None
    window = QuotaWindow.objects.select_related("quota__department", "quota__flavor", "priority_class").get(
        pk=edge.window_id)
    victims, rows, unmet = _victims_locked(window=window, now=now)
    if unmet:
        return None
    quota, label = window.quota, scope_label(window)
    before, after = edge.before, edge.after
    waiting, events = reclaims_start(actor=None, victims=victims, rows=rows, now=now, window_id=window.pk,
                                     reason=_reason(window, before["limit"], after["limit"], edge.at))
    taken = [victim.allocation_id for victim in victims]
    edge.reclaimed = [*edge.reclaimed, *taken]
    edge.reclaim_pending = False
    edge.save(update_fields=["reclaimed", "reclaim_pending"])
    for write in events:
        write()
    details: dict[str, Any] = {
        "at": edge.at.isoformat(), "kind": edge.kind, "quota": quota.pk, "scope": label,
        "reclaimed": taken, "late_seconds": int((now - edge.at).total_seconds()),
    }
    if waiting:
        details["notice"] = "the reclaimed grants run out their notice first"
    audit_record(actor=None, action=actions.QUOTA_WINDOW_RECLAIM_MET, target=window,
                 department_id=quota.department_id, before=before, after=after, details=details)
    return AppliedEdge(window.pk, quota.pk, quota.department.slug, label, edge.at, edge.kind, before, after, 0,
                       tuple(taken))


def _reason(window: QuotaWindow, before: str, after: str, at: datetime.datetime) -> str:
    return (f"Reclaimed by quota window #{window.pk}: the limit of department {window.quota.department.slug} for "
            f"{scope_label(window)} went down from {before} to {after} at {minute_utc(at)}, "
            "and the department held more than that.")


def _victims_locked(
    *, window: QuotaWindow, now: datetime.datetime
) -> tuple[list[VictimInfo], dict[int, Allocation], bool]:
    """The grants to reclaim for the window's lower limit, row-locked (SKIP LOCKED, as approval
    does after the chain lock); planned again without the ones another transaction holds."""
    untakeable: set[int] = set()
    for _ in range(VICTIM_LOCK_TRIES):
        victims, fits = shrink_victims(department_id=window.quota.department_id, scope=window_scope(window), at=now,
                                       untakeable=untakeable)
        if not fits:
            return [], {}, True
        wanted = {victim.allocation_id for victim in victims}
        rows = victims_lock(ids=wanted) if wanted else {}
        if len(rows) == len(wanted):
            return victims, rows, False
        untakeable |= wanted - set(rows)
    return [], {}, True


def _warned(window_id: int, at: datetime.datetime, kind: str) -> bool:
    """Whether the shrink at this edge was announced already (its audit event says so)."""
    events = AuditEvent.objects.filter(action=actions.QUOTA_WINDOW_SHRINK_WARNED.code,
                                       target_type=QuotaWindow._meta.label_lower, target_id=str(window_id))
    return any(event.details.get("at") == at.isoformat() and event.details.get("kind") == kind for event in events)


def quota_window_shrinks_warn(
    *, now: datetime.datetime, within: datetime.timedelta = WARN_WITHIN,
    specs: dict[int, list[windows.WindowSpec]] | None = None,
) -> int:
    """Announce, once per window and edge, each shrink coming within ``within``; returns how many."""
    announced = 0
    for shrink in quota_window_shrinks_coming(now=now, within=within, specs=specs):
        if not _warned(shrink.window.pk, shrink.at, shrink.kind) and _warn(shrink=shrink):
            announced += 1
    return announced


@transaction.atomic
def _warn(*, shrink: ComingShrink) -> bool:
    window = shrink.window
    department_chain(department_id=window.quota.department_id, lock=True)  # one announcement, even racing
    if _warned(window.pk, shrink.at, shrink.kind):
        return False
    audit_record(
        actor=None, action=actions.QUOTA_WINDOW_SHRINK_WARNED, target=window, department_id=window.quota.department_id,
        before=numbers(shrink.before), after=numbers(shrink.after),
        details={
            "at": shrink.at.isoformat(), "kind": shrink.kind, "quota": window.quota_id, "scope": shrink.scope,
            "shrink_policy": window.shrink_policy, "owners": shrink.owners,
            "grants": [{**grant.victim.as_details(), "requested_by": grant.requested_by,
                        "members": list(grant.members)} for grant in shrink.grants],
        },
    )
    return True

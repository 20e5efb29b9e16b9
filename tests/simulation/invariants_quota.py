"""The quota invariants, over time, on the ledger's numbers:

* **admission**: after every admission (an approval, a renewal over its added interval, a raise over
  what remains), at every instant the new grant really holds, every quota on its department chain
  that applies holds no more than its effective limit × the grant's class factor, and a class's
  share (where a window of that class sets it) no more than the share, whatever the factor;
* **reclaim**: a grant taken for a request (all of it, or some units) was not waiting for its own
  victims (the beneficiary of a reclaim), gives back no unit that lies within its own department's
  guarantee throughout when taken for another department, and the reason stated for it is true; a
  grant on its cluster gets its class's notice;
* **shrink met**: once a shrink edge of a ``reclaim`` window applied, at the first tick no other
  actor raced after its reclaims (taken at the edge, or by a later tick when grants were locked
  then) ran out their notice, what the department held then is within the new limit.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from tests.simulation import windows_eval
from tests.simulation.ledger import FOUR, HOLDING, ON_CLUSTER, Grant, Snapshot

Found = tuple[str, str]
MICROSECOND = datetime.timedelta(microseconds=1)


def _rank(snap: Snapshot, department_id: int, scope: int | None, at: datetime.datetime, grant: Grant,
          class_id: int | None = None, asking: Grant | None = None) -> Decimal:
    """What the department's subtree holds at ``at`` up to and including ``grant``, ranked by
    priority (highest first), then age (oldest first); with the request ``asking`` counted over its
    interval at its priority, when it is in the subtree."""
    def key(other: Grant) -> tuple[int, int]:
        return (-snap.classes[other.class_id].value, other.id)
    mine = key(grant)
    total = sum((span.weight for span in snap.spans(department_id, scope, class_id)
                 if span.start <= at < span.end and key(span.grant) <= mine), Decimal(0))
    if (asking is not None and asking.department_id in snap.subtree(department_id) and key(asking) <= mine
            and asking.starts_at <= at < asking.ends_at and (class_id is None or asking.class_id == class_id)):
        total += snap.weight(asking, scope)
    return total


def _scopes(snap: Snapshot, department_id: int, grant: Grant) -> Iterator[tuple[int | None, Any]]:
    for scope in (grant.flavor_id, None):
        quota = snap.quotas.get((department_id, scope))
        if quota is not None:
            yield scope, quota


def admission_check(snap: Snapshot, grant: Grant, low: datetime.datetime, high: datetime.datetime,
                    what: str, later: frozenset[int] = frozenset()) -> list[Found]:
    """The grant's admission over ``[low, high)``, next to everything but ``later`` (what actors
    acting at the same time admitted after it)."""
    span = snap.active(grant)
    if span is None:
        return []
    start, end = max(span[0], low), min(span[1], high)
    factor = snap.classes[grant.class_id].factor
    found: list[Found] = []
    for department_id in snap.chain(grant.department_id):
        for scope, quota in _scopes(snap, department_id, grant):
            for at in (snap.points(start, end, [quota.id]) if start < end else []):
                held = snap.holds(department_id, scope, at, without=later)
                _, limit = snap.effective(quota, at)
                allowed = (limit * factor).quantize(FOUR)
                label = f"{snap.slugs[department_id]}/{snap.flavors[scope].name if scope else 'gpu-equivalents'}"
                if held > allowed:
                    found.append(("quota-over-limit", f"{what} of #{grant.id}: {label} holds {held} at "
                                  f"{at.isoformat()}, above its effective limit {limit} × {factor} = {allowed}"))
                    return found
                if windows_eval.class_window_sets_limit(snap.windows_of(quota.id), at, grant.class_id):
                    share = snap.effective(quota, at, grant.class_id)[1]
                    mine = snap.holds(department_id, scope, at, class_id=grant.class_id, without=later)
                    if mine > share:
                        name = snap.classes[grant.class_id].name
                        found.append(("quota-over-limit", f"{what} of #{grant.id}: class {name} holds {mine} of "
                                      f"{label} at {at.isoformat()}, above its share {share}"))
                        return found
    return found


def admissions(prev: Snapshot, snap: Snapshot, now: datetime.datetime, order: dict[int, int]) -> list[Found]:
    """Every admission of the step, checked over the interval it was admitted for. ``order``: the
    audit sequence number of each grant's admission in this step; one admitted later (by an actor
    acting at the same time) is left out of an earlier one's check, since it was not there yet."""
    found: list[Found] = []
    for grant in snap.grants.values():
        mine = order.get(grant.id)
        later = frozenset(other for other, seq in order.items() if mine is not None and seq > mine)
        if grant.state not in HOLDING:
            continue
        before = prev.grants.get(grant.id)
        if before is None or before.state == "pending":
            if grant.decided_at is not None:
                found += admission_check(snap, grant, grant.starts_at, grant.ends_at, "approval", later)
            continue
        if before.state not in HOLDING:
            continue
        if grant.ends_at > before.ends_at:
            found += admission_check(snap, grant, before.ends_at, grant.ends_at, "renewal", later)
        if grant.quantity > before.quantity:
            found += admission_check(snap, grant, max(now, grant.starts_at), grant.ends_at, "raise", later)
    return found


def _overlap(prev: Snapshot, victim: Grant, requester: Grant) -> tuple[datetime.datetime, datetime.datetime] | None:
    span = prev.active(victim)
    if span is None:
        return None
    start, end = max(span[0], requester.starts_at), min(span[1], requester.ends_at)
    return (start, end) if start < end else None


def _beyond(prev: Snapshot, victim: Grant, window: tuple[datetime.datetime, datetime.datetime],
            departments: list[int], line: str, asking: Grant | None = None) -> bool | None:
    """Whether the victim lies beyond the ``line`` (guaranteed or limit) of one of these departments
    at some instant of ``window`` (the request ``asking`` counted at its priority); None when none
    of them has a quota that applies."""
    any_quota = False
    for department_id in departments:
        for scope, quota in _scopes(prev, department_id, victim):
            any_quota = True
            for at in prev.points(window[0], window[1], [quota.id]):
                guaranteed, limit = prev.effective(quota, at)
                if _rank(prev, department_id, scope, at, victim, asking=asking) > (
                        guaranteed if line == "guaranteed" else limit):
                    return True
                if line == "limit" and windows_eval.class_window_sets_limit(
                        prev.windows_of(quota.id), at, victim.class_id):
                    share = prev.effective(quota, at, victim.class_id)[1]
                    if _rank(prev, department_id, scope, at, victim, victim.class_id, asking) > share:
                        return True
    return False if any_quota else None


def reclaims(prev: Snapshot, snap: Snapshot, started: datetime.datetime,
             events: list[tuple[str, int, dict[str, Any]]]) -> list[Found]:
    """Every reclaim the step started (its ``allocation.reclaiming`` events, whole or in part)."""
    found: list[Found] = []
    for action, target, details in events:
        before = prev.grants.get(target)
        if action == "allocation.reclaimed" and details.get("partial") and before is not None:
            found += _given_back(before, snap.grants[target], details, events)
        if action != "allocation.reclaiming" or before is None:
            continue
        notice = prev.classes[before.class_id].notice
        deadline = datetime.datetime.fromisoformat(details["deadline"]) if details.get("deadline") else None
        if before.state in ON_CLUSTER and notice > 0 and (
                deadline is None or deadline < started + datetime.timedelta(minutes=notice)):
            found.append(("reclaim-notice", f"#{target} ({before.state}, class {prev.classes[before.class_id].name} "
                          f"with {notice} min notice) was taken with deadline {deadline}"))
        requester = snap.grants.get(details["for"]) if details.get("for") is not None else None
        if requester is None:
            continue
        if prev.victims_of(target):
            waiting = sorted(victim.id for victim in prev.victims_of(target))
            found.append(("reclaim-beneficiary", f"#{target} was taken for #{requester.id} ({details.get('why')}) while "
                          f"it waited for its own victims {waiting}"))
        units = int(details.get("units") or before.quantity)
        found += _reason(prev, before, requester, str(details.get("why", "")), units)
    return found


def _given_back(before: Grant, after: Grant, details: dict[str, Any],
                events: list[tuple[str, int, dict[str, Any]]]) -> list[Found]:
    """A partial reclaim that finished gave back the units named when it started, no more, no less."""
    started = [d for action, target, d in events if action == "allocation.reclaiming" and target == after.id]
    named = before.reclaim_units if before.reclaim_units is not None and not started else (
        started[-1].get("units") if started else None)
    units = int(details.get("units") or 0)
    if named is not None and units != named:
        return [("reclaim-units", f"#{after.id} was to give back {named} units and gave back {units}")]
    if after.quantity != before.quantity - units and after.state in HOLDING:
        return [("reclaim-units", f"#{after.id} held {before.quantity} units, gave back {units}, and holds "
                 f"{after.quantity}")]
    return []


def _within_everywhere(prev: Snapshot, victim: Grant, window: tuple[datetime.datetime, datetime.datetime],
                       departments: list[int], units: int) -> bool:
    """Whether one of the ``units`` the victim gives back (its highest) lies within the guarantee of
    every one of these departments that has a quota applying, at every instant of ``window``."""
    protected = False
    for department_id in departments:
        for scope, quota in _scopes(prev, department_id, victim):
            one = prev.weight(victim, scope, units=1)
            if not one:
                continue
            protected = True
            for at in prev.points(window[0], window[1], [quota.id]):
                before = _rank(prev, department_id, scope, at, victim) - prev.weight(victim, scope)
                within = max(0, min(victim.quantity, int((prev.effective(quota, at)[0] - before) // one)))
                if within <= victim.quantity - units:
                    return False
    return protected


def _reason(prev: Snapshot, victim: Grant, requester: Grant, why: str, units: int) -> list[Found]:
    window = _overlap(prev, victim, requester)
    if window is None:
        return [("reclaim-reason", f"#{victim.id} taken for #{requester.id} though they never hold at once")]
    mine, theirs = prev.chain(victim.department_id), prev.chain(requester.department_id)
    below = [department for department in mine if department not in theirs]
    value, asked = prev.classes[victim.class_id], prev.classes[requester.class_id]
    if why == "borrowed":
        if below and _within_everywhere(prev, victim, window, below, units):
            return [("reclaim-within-guarantee", f"{units} of the {victim.quantity} units of #{victim.id} "
                     f"({prev.slugs[victim.department_id]}) were taken for #{requester.id} "
                     f"({prev.slugs[requester.department_id]}), though one of them lies within its guarantee throughout")]
        return []
    if why == "oversubscribed":
        if not (asked.factor <= 1 or asked.value > value.value):
            return [("reclaim-reason", f"#{victim.id} taken as oversubscribed for #{requester.id}, which oversubscribes "
                     "itself and has no higher priority")]
        if not _beyond(prev, victim, window, mine, "limit", requester):
            return [("reclaim-reason", f"#{victim.id} was taken for #{requester.id} as oversubscribed, but it lies "
                     "within the plain limit of every quota on its chain")]
        return []
    if why == "lower-priority":
        if not (value.value < asked.value and asked.preempts and victim.department_id in prev.subtree(requester.department_id)):
            return [("reclaim-reason", f"#{victim.id} taken as lower-priority for #{requester.id}: "
                     f"{value.name} vs {asked.name}, departments {prev.slugs[victim.department_id]} and "
                     f"{prev.slugs[requester.department_id]}")]
        return []
    return [("reclaim-reason", f"#{victim.id} taken for #{requester.id} for an unknown reason {why!r}")]


def shrink_obligations(prev: Snapshot, snap: Snapshot, ticks: list[datetime.datetime],
                       obligations: list[dict[str, Any]]) -> None:
    """Record each new shrink edge of a ``reclaim`` window (what held when it applied must come
    within the new limit once the reclaimed grants ran out their notice)."""
    windows = {row.id: row for row in snap.windows}
    for key in sorted(snap.edges - prev.edges, key=lambda k: (k[1], k[0])):
        window_id, at, _ = key
        row = windows[window_id]
        applied = next((tick for tick in ticks if tick >= at), None)
        if row.shrink_policy != "reclaim" or applied is None:
            continue
        quota = next(q for q in snap.quotas.values() if q.id == row.quota_id)
        rows = snap.windows_of(quota.id)
        lower = windows_eval.effective(guaranteed=quota.guaranteed, limit=quota.limit, rows=rows, at=at,
                                       priority_class_id=row.priority_class_id)[1]
        higher = windows_eval.effective(guaranteed=quota.guaranteed, limit=quota.limit, rows=rows, at=at - MICROSECOND,
                                        priority_class_id=row.priority_class_id)[1]
        if lower >= higher:
            continue
        held = {g.id for g in prev.grants.values() if g.state in HOLDING and not g.pending_reclaim
                and (span := prev.active(g)) is not None and span[0] <= applied < span[1]}
        victims = snap.edge_reclaimed.get(key, ())
        obligations.append({"window": window_id, "quota": quota.id, "department": quota.department_id,
                            "scope": quota.flavor_id, "class": row.priority_class_id, "held": held,
                            "key": key, "edge": at, "victims": victims, "quota_rows": rows,
                            "base": (quota.guaranteed, quota.limit)})


def shrinks_met(snap: Snapshot, tick: datetime.datetime, obligations: list[dict[str, Any]]) -> list[Found]:
    """At a tick no other actor raced: each shrink whose reclaims (the edge's, taken then or by a
    later tick) are all done must be met."""
    found: list[Found] = []
    for duty in list(obligations):
        duty["victims"] = snap.edge_reclaimed.get(duty["key"], duty["victims"])
        if any(snap.grants[v].pending_reclaim for v in duty["victims"] if v in snap.grants):
            continue  # its victims run out their notice first
        obligations.remove(duty)
        window = next(row for row in snap.windows if row.id == duty["window"])
        quota = next((q for q in snap.quotas.values() if q.id == duty["quota"]), None)
        if quota is None or window.state != "approved" or not windows_eval.in_force(window, tick):
            continue
        if snap.windows_of(quota.id) != duty["quota_rows"] or (quota.guaranteed, quota.limit) != duty["base"]:
            continue  # the windows changed since: the edge's numbers no longer hold
        limit = snap.effective(quota, tick, duty["class"])[1]
        held = snap.holds(duty["department"], duty["scope"], tick, class_id=duty["class"], only=duty["held"])
        if held > limit:
            found.append(("shrink-reclaim-met", f"window #{duty['window']} lowered {snap.slugs[duty['department']]}'s "
                          f"limit to {limit} at {duty['edge'].isoformat()} (reclaimed {list(duty['victims'])}), yet "
                          f"what it held then still holds {held} at {tick.isoformat()}"))
    return found

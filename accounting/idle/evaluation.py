"""``idle_cases_evaluate``: the periodic idle evaluation (beat every 5 minutes, and the embedded
default's clock). Reads every active grant's readings (``accounting.idle.reading``), asks the pure
ladder (``allocations.grants.idle_ladder``) for each grant's next move, and records it.

Moves that change a case's state (opened, warned, cleared, reclaimed, and the closing of cases
whose grant ended) are each one transaction: the grant's row is locked, then its open case (the
order of ``kernel.locks``), the case is checked to be as the evaluation read it (a keep or a
release in between wins, and the next evaluation starts from it), and the move is written with
its audit event. The evidence the ladder went by (the policy's numbers, the known and unknown
minutes, the newest reading) is kept on the case and in the event. A case's numbers that change
without its state (its idle minutes) are updated without an event.
"""

from __future__ import annotations

import datetime
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from accounting.idle.reading import Watch, idle_watches_read
from accounting.idle_models import IdleAction, IdleCase, IdleState
from allocations.grants import idle_ladder as ladder
from allocations.grants.notices import allocation_notify
from allocations.grants.reclaims import allocation_reclaim_idle
from allocations.grants.transitions import allocation_lock
from allocations.models import AllocationState
from audit import actions
from audit.actions import AuditAction
from audit.services import audit_record
from kernel.clock import clock_now
from kernel.times import minute_utc
from kernel.transactions import retry_on_deadlock
from notifications.events import IDLE_WARNING


@dataclass
class EvaluationOutcome:
    at: datetime.datetime
    watched: int = 0
    held_off: int = 0
    moves: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {"at": self.at.isoformat(), "watched": self.watched, "held_off": self.held_off, **dict(self.moves)}


def case_snapshot(case: IdleCase) -> dict[str, Any]:
    def text(moment: datetime.datetime | None) -> str | None:
        return moment.isoformat() if moment is not None else None

    return {
        "state": case.state, "allocation": case.allocation_id, "policy": case.policy_id,
        "idle_since": text(case.idle_since), "warned_at": text(case.warned_at),
        "action_due_at": text(case.action_due_at), "rearm_at": text(case.rearm_at),
    }  # fmt: skip


def case_audit(
    *, actor: Any, action: AuditAction, case: IdleCase, department_id: int, before: dict[str, Any] | None,
    details: dict[str, Any] | None = None,
) -> None:  # fmt: skip
    after = case_snapshot(case)
    changed = {key: value for key, value in (before or {}).items() if after.get(key) != value}
    audit_record(
        actor=actor, action=action, target=case, department_id=department_id, before=changed,
        after={key: after[key] for key in changed} if before is not None else after, details=details,
    )  # fmt: skip


def evidence(watch: Watch, result: ladder.Step, *, last_bucket: datetime.datetime) -> dict[str, Any]:
    """What the ladder went by, for the case and its events."""
    found = result.streak or ladder.streak(watch.buckets)
    run = [b.activity for b in watch.buckets
           if result.idle_since is not None and b.start >= result.idle_since and b.activity is not None]  # fmt: skip
    newest = found.newest_known
    return {
        "policy": watch.policy.as_evidence(), "idle_minutes": result.idle_minutes,
        "since_warning_minutes": result.since_warning_minutes, "known_buckets": found.known,
        "unknown_buckets": found.unknown, "watched_since": watch.since.isoformat(), "last_bucket": last_bucket.isoformat(),
        "newest_known": newest.start.isoformat() if newest is not None else None,
        "newest_activity": newest.activity if newest is not None else None,
        "run_mean_activity": round(sum(run) / len(run), 4) if run else None,
        "run_max_activity": round(max(run), 4) if run else None, "why": result.why,
    }  # fmt: skip


def idle_cases_evaluate(*, now: datetime.datetime | None = None) -> EvaluationOutcome:
    """One pass of the ladder over every active grant under an idle policy."""
    now = now or clock_now()
    last_bucket = ladder.last_complete_bucket(now)
    reading = idle_watches_read(now=now, last_bucket=last_bucket)
    outcome = EvaluationOutcome(at=now, watched=len(reading.watches), held_off=reading.held_off)
    for orphan, why in reading.orphans:
        if case_close(case_id=orphan.pk, now=now, why=why):
            outcome.moves["closed"] += 1
    for watch in reading.watches:
        case = watch.case
        opened = ladder.OpenCase(case.state, case.idle_since, case.warned_at, case.action_due_at) if case else None
        result = ladder.step(case=opened, buckets=watch.buckets, rules=watch.rules, now=now, last_bucket=last_bucket)
        move = result.move
        if move is ladder.Move.ACT and watch.policy.action != IdleAction.RECLAIM:
            move = ladder.Move.UPDATE  # notify only: the warning was the action
        if move is ladder.Move.NONE:
            continue
        found = evidence(watch, result, last_bucket=last_bucket)
        if move is ladder.Move.UPDATE:
            assert case is not None
            IdleCase.objects.filter(pk=case.pk, state=case.state).update(
                idle_minutes=result.idle_minutes, last_evaluated_at=now, evidence=found, policy=watch.policy
            )
            continue
        if case_move(watch=watch, move=move, result=result, found=found, now=now):
            outcome.moves[move.value] += 1
    return outcome


@retry_on_deadlock()
def case_move(
    *, watch: Watch, move: ladder.Move, result: ladder.Step, found: dict[str, Any], now: datetime.datetime
) -> bool:
    """Record one move up (or off) the ladder; False when the grant or its case changed since it was read."""
    row = allocation_lock(watch.allocation_id)
    case = IdleCase.objects.select_for_update().filter(allocation_id=row.pk, state__in=[
        IdleState.OBSERVING, IdleState.WARNED]).first()  # fmt: skip
    read = watch.case
    if row.state != AllocationState.ACTIVE or (case is None) != (read is None):
        return False
    if case is not None and read is not None and (case.pk != read.pk or case.state != read.state):
        return False
    department_id = watch.department_id
    if case is None:
        assert result.idle_since is not None
        case = IdleCase.objects.create(
            allocation=row, policy=watch.policy, state=IdleState.OBSERVING, opened_at=now, idle_since=result.idle_since,
            idle_minutes=result.idle_minutes, last_evaluated_at=now, evidence=found,
        )  # fmt: skip
        case_audit(actor=None, action=actions.IDLE_CASE_OPENED, case=case, department_id=department_id, before=None,
                   details=found)  # fmt: skip
    before = case_snapshot(case)
    case.idle_minutes, case.last_evaluated_at, case.evidence, case.policy = result.idle_minutes, now, found, watch.policy
    if move is ladder.Move.OPEN:
        case.save()
        return True
    if move is ladder.Move.WARN:
        case.state, case.warned_at, case.action_due_at = IdleState.WARNED, now, result.action_due_at
        case.save()
        allocation_notify(IDLE_WARNING, row, idle_minutes=result.idle_minutes, policy=watch.policy.name,
                          action=watch.policy.action, action_due_at=case.action_due_at.isoformat() if case.action_due_at else None)
        case_audit(actor=None, action=actions.IDLE_CASE_WARNED, case=case, department_id=department_id, before=before,
                   details=found)  # fmt: skip
        return True
    if move is ladder.Move.CLEAR:
        case.state, case.closed_at, case.reason = IdleState.CLEARED, now, result.why
        case.save()
        case_audit(actor=None, action=actions.IDLE_CASE_CLEARED, case=case, department_id=department_id, before=before,
                   details=found)  # fmt: skip
        return True
    assert move is ladder.Move.ACT
    reason = (f"Reclaimed after idle case #{case.pk}: {result.why}; warned at "
              f"{minute_utc(case.warned_at) if case.warned_at else '?'} under idle policy {watch.policy.name!r}.")  # fmt: skip
    events = allocation_reclaim_idle(row=row, now=now, reason=reason, case_id=case.pk)
    case.state, case.closed_at, case.reason = IdleState.RECLAIMED, now, reason
    case.save()
    for write in events:
        write()
    case_audit(actor=None, action=actions.IDLE_CASE_RECLAIMED, case=case, department_id=department_id, before=before,
               details=found)  # fmt: skip
    return True


@retry_on_deadlock()
def case_close(*, case_id: int, now: datetime.datetime, why: str) -> bool:
    """Close an open case whose grant is no longer active (released: ``released``; otherwise
    ``cleared``) or that no policy covers any more."""
    allocation_id = IdleCase.objects.filter(pk=case_id).values_list("allocation_id", flat=True).first()
    if allocation_id is None:
        return False
    row = allocation_lock(allocation_id)
    case = IdleCase.objects.select_for_update().filter(pk=case_id, state__in=[IdleState.OBSERVING, IdleState.WARNED]).first()
    if case is None:
        return False
    before = case_snapshot(case)
    released = row.state == AllocationState.RELEASED
    case.state = IdleState.RELEASED if released else IdleState.CLEARED
    case.closed_at = now
    case.reason = f"The grant was {row.state}." if row.state != AllocationState.ACTIVE else why[:1].upper() + why[1:] + "."
    case.save()
    case_audit(actor=None, action=actions.IDLE_CASE_RELEASED if released else actions.IDLE_CASE_CLEARED, case=case,
               department_id=row.project.department_id, before=before, details={"why": case.reason})  # fmt: skip
    return True

"""What people do with an idle case, and who may (docs/accounting.md, "Idle grants"):

* **keep** (the grant's requester, a member of its project, or an admin of its department): with a
  reason; the case closes and the grant is not watched again for the policy's ``keep_hours``. A
  grant may be kept at most ``max_keeps`` times in any 7 days (409 ``keeps_exhausted`` beyond).
* **exempt** (an admin of the grant's department, or a platform admin, never for a grant they
  requested while four-eyes holds): with a reason and an end date; not watched until then.
* **release** (whoever may release the grant): the grant is released at once, through
  ``allocation_release``, and the case closes as released.

Each acts on an open case only (409 otherwise) and is audited with the case's state before and
after. Locks: the grant's row first, then the case (``kernel.locks``), as the evaluation takes them.
"""

from __future__ import annotations

import datetime

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from accounting.idle.evaluation import case_audit, case_snapshot
from accounting.idle.selectors import idle_case_get
from accounting.idle_models import OPEN_STATES, IdleCase, IdleState
from allocations.catalogue.selectors import allocation_may_change
from allocations.grants import idle_ladder as ladder
from allocations.grants.services import allocation_release
from allocations.grants.transitions import allocation_lock
from audit import actions
from kernel.clock import clock_now
from kernel.errors import Conflict, FieldError, FourEyes, NotAllowed, TransitionNotAllowed
from kernel.limits import TEXT_LIMIT
from kernel.words import counted
from tenants.access import access_for

MIN_EXEMPTION = datetime.timedelta(minutes=5)


class KeepsExhausted(Conflict):
    code = "keeps_exhausted"


def _reason(reason: str, *, field: str = "reason") -> str:
    text = (reason or "").strip()
    if not text:
        raise FieldError(field, "Say why, in a few words.")
    if len(text) > TEXT_LIMIT:
        raise FieldError(field, f"At most {TEXT_LIMIT} characters.")
    return text


def idle_case_may_keep(*, actor: User, case: IdleCase) -> None:
    """Keeping or releasing an idle grant: its requester, its project's members, its department's admins."""
    if not allocation_may_change(user=actor, allocation=case.allocation):
        raise NotAllowed("Only the grant's project members and its department's admins may keep or release it.")


def idle_case_may_exempt(*, actor: User, case: IdleCase) -> None:
    """Exempting: an admin of the grant's department (or a platform admin), never for their own grant."""
    allocation = case.allocation
    if not access_for(actor).can_administer_department(allocation.project.department_id):
        raise NotAllowed("Only the department's admins may exempt a grant from its idle policy.")
    if settings.GPUPORTAL_FOUR_EYES and allocation.requested_by_id == actor.pk:
        raise FourEyes("Nobody exempts their own grant: another admin must (four-eyes).")


def _locked_open(*, actor: User, case_id: int) -> tuple[IdleCase, dict[str, object]]:
    """The case (visible to ``actor``, else 404), locked after its grant, and its state before."""
    seen = idle_case_get(user=actor, case_id=case_id)
    allocation_lock(seen.allocation_id)
    case = IdleCase.objects.select_for_update(of=("self",)).select_related("policy", "allocation__project").get(pk=case_id)
    if case.state not in OPEN_STATES:
        raise TransitionNotAllowed(
            f"Idle case #{case.pk} is {case.state}; only an open case can be kept, exempted or released.",
            details={"state": case.state},
        )
    return case, case_snapshot(case)


def idle_case_keep(*, actor: User, case_id: int, reason: str, now: datetime.datetime | None = None) -> IdleCase:
    now = now or clock_now()
    with transaction.atomic():
        case, before = _locked_open(actor=actor, case_id=case_id)
        idle_case_may_keep(actor=actor, case=case)
        text = _reason(reason)
        kept_at = [moment for moment in IdleCase.objects.filter(
            allocation_id=case.allocation_id, state=IdleState.KEPT, closed_at__gt=now - ladder.KEEP_SPAN
        ).values_list("closed_at", flat=True) if moment is not None]  # fmt: skip
        policy = case.policy
        if ladder.keeps_left(kept_at=kept_at, now=now,
                             max_keeps=int(policy.max_keeps)) == 0:  # fmt: skip
            done = (f"idle policy {policy.name!r} allows no keeps" if not policy.max_keeps else
                    f"grant #{case.allocation_id} was kept {counted(int(policy.max_keeps), 'time')} in the last 7 days, as often as "
                    f"its idle policy {policy.name!r} allows")  # fmt: skip
            raise KeepsExhausted(
                f"Not kept: {done}; ask a department admin for an exemption, or release it.",
                details={"max_keeps": policy.max_keeps, "kept_at": [moment.isoformat() for moment in kept_at]},
            )
        case.state, case.closed_at, case.reason, case.decided_by = IdleState.KEPT, now, text, actor
        case.rearm_at = now + datetime.timedelta(hours=int(policy.keep_hours))
        case.save()
        case_audit(actor=actor, action=actions.IDLE_CASE_KEPT, case=case,
                   department_id=case.allocation.project.department_id, before=before,
                   details={"reason": text, "keep_hours": policy.keep_hours})  # fmt: skip
    return case


def idle_case_exempt(
    *, actor: User, case_id: int, until: datetime.datetime, reason: str, now: datetime.datetime | None = None
) -> IdleCase:
    now = now or clock_now()
    with transaction.atomic():
        case, before = _locked_open(actor=actor, case_id=case_id)
        allocation = case.allocation
        idle_case_may_exempt(actor=actor, case=case)
        text = _reason(reason)
        longest = datetime.timedelta(days=int(settings.GPUPORTAL_MAX_ALLOCATION_DAYS))
        if until < now + MIN_EXEMPTION:
            raise FieldError("until", "An exemption ends in the future (at least 5 minutes from now).")
        if until > now + longest:
            raise FieldError("until", f"An exemption lasts at most {longest.days} days.")
        case.state, case.closed_at, case.reason, case.decided_by = IdleState.EXEMPTED, now, text, actor
        case.rearm_at = until
        case.save()
        case_audit(actor=actor, action=actions.IDLE_CASE_EXEMPTED, case=case,
                   department_id=allocation.project.department_id, before=before,
                   details={"reason": text, "until": until.isoformat()})  # fmt: skip
    return case


def idle_case_release(*, actor: User, case_id: int, comment: str = "", now: datetime.datetime | None = None) -> IdleCase:
    now = now or clock_now()
    with transaction.atomic():
        case, before = _locked_open(actor=actor, case_id=case_id)
        idle_case_may_keep(actor=actor, case=case)
        text = (comment or "").strip()[:TEXT_LIMIT]
        case.state, case.closed_at, case.decided_by = IdleState.RELEASED, now, actor
        case.reason = text or "Released from the idle case."
        case.save()  # before the grant's events: its key checks run before the chain lock (kernel.locks)
        allocation_release(actor=actor, allocation_id=case.allocation_id,
                           comment=text or f"Released from idle case #{case.pk}.")  # fmt: skip
        case_audit(actor=actor, action=actions.IDLE_CASE_RELEASED, case=case,
                   department_id=case.allocation.project.department_id, before=before,
                   details={"comment": text} if text else None)  # fmt: skip
    return case

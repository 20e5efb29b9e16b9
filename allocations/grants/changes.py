"""Changes to an allocation's terms: renewal (a later end) and resize (another quantity).

Renewal: a pending request just gets its new end (its approval judges the whole period). A grant
(holding, not being reclaimed) is renewed at once when the new end is at most
``GPUPORTAL_SELF_RENEW_DAYS`` after the end it was approved with (``original_ends_at``), and
becomes a pending :class:`AllocationChange` beyond that, which an admin of the department approves.
Either way admission runs for the added interval (``allocations.admission.extending``) when it is
applied: quota and GPUs must be free then, the grant's own bookings staying where they are.

Resize: fewer units is self-service (the highest-numbered units' reservations are released, as a
partial reclaim releases them: ``allocation_units_give_back``);
more units is a pending change, admitted on approval over what remains of the grant's interval,
only the added units placed. A change never reclaims another grant: it is refused (409) instead.
A grant that gives back some of its units at a reclaim's deadline takes no change until then.

Four-eyes: nobody decides a change they requested (``GPUPORTAL_FOUR_EYES``). Locks as in
``allocations.grants.services.allocation_approve``: the allocation, its department chain, its cluster,
and the audit chain last (push rows are written before the event).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404

from allocations.admission import extending
from allocations.booking import reservations
from allocations.booking.state import reservations_restamp
from allocations.catalogue.selectors import allocation_may_change, live_reservations_on
from allocations.catalogue.states import HOLDING_STATES, ON_CLUSTER_STATES
from allocations.grants.transitions import allocation_audit, allocation_lock, allocation_snapshot, project_sync_enqueue
from allocations.models import Allocation, AllocationChange, AllocationState, ChangeKind, ChangeState
from audit import actions
from audit.models import Outcome
from audit.services import audit_record
from clusters.models import Cluster
from kernel.clock import clock_now
from kernel.errors import (
    CapacityExceeded,
    Conflict,
    FieldError,
    FourEyes,
    NotAllowed,
    QuotaExceeded,
    TransitionNotAllowed,
)
from kernel.limits import QUANTITY_MAX, TEXT_LIMIT
from kernel.times import minute_utc, time_readable
from kernel.transactions import retry_on_deadlock
from kernel.words import counted
from tenants.access import access_for, department_chain

# Grants whose terms may change: holding, and not on their way out.
CHANGEABLE_STATES: frozenset[str] = HOLDING_STATES - {AllocationState.RECLAIMING}


@dataclass(frozen=True)
class ChangeOutcome:
    """What a renewal or a resize did: ``applied`` at once (``change`` None), or ``change`` pending."""

    allocation: Allocation
    change: AllocationChange | None
    applied: bool


def _require_changer(*, actor: User, allocation: Allocation) -> None:
    if not allocation_may_change(user=actor, allocation=allocation):
        raise NotAllowed("Only the project's members or the department's admins may change this allocation.")


def _require_no_reclaim(allocation: Allocation) -> None:
    """A grant giving back some of its units at a reclaim's deadline takes no change until then:
    admission planned the reclaim on its units as they are."""
    if allocation.reclaim_units is not None and allocation.state != AllocationState.RECLAIMING:
        deadline = allocation.reclaim_deadline.isoformat() if allocation.reclaim_deadline else "its deadline"
        raise TransitionNotAllowed(
            f"Allocation #{allocation.pk} gives back {allocation.reclaim_units} of its {allocation.quantity} units "
            f"at {time_readable(deadline)} (reclaimed for request #{allocation.reclaimed_for_id}); it takes no change until then.",
            details={"state": allocation.state, "reclaim_units": allocation.reclaim_units, "reclaim_deadline": deadline},
        )


def _require_change_decider(*, actor: User, allocation: Allocation, change: AllocationChange) -> None:
    if not access_for(actor).can_administer_department(allocation.project.department_id):
        raise NotAllowed("Only an admin of the allocation's department may decide on a change to it.")
    if settings.GPUPORTAL_FOUR_EYES and change.requested_by_id == actor.pk:
        raise FourEyes(
            "Nobody decides on their own change: another admin of the department must.",
            details={"requested_by": actor.get_username()},
        )


def _check_justification(justification: str) -> None:
    if len(justification) > TEXT_LIMIT:
        raise FieldError("justification", f"At most {TEXT_LIMIT} characters.")


def self_renew_until(allocation: Allocation) -> datetime.datetime:
    """The latest end a renewal of this grant reaches without an admin's approval."""
    base = allocation.original_ends_at or allocation.ends_at
    return base + datetime.timedelta(days=settings.GPUPORTAL_SELF_RENEW_DAYS)


def _check_new_end(*, allocation: Allocation, ends_at: datetime.datetime) -> None:
    if ends_at <= allocation.ends_at:
        raise FieldError("ends_at", f"The new end must be after the current end ({minute_utc(allocation.ends_at)}).")
    longest = datetime.timedelta(days=settings.GPUPORTAL_MAX_ALLOCATION_DAYS)
    if ends_at - max(clock_now(), allocation.starts_at) > longest:
        raise FieldError("ends_at", f"An allocation may run at most {settings.GPUPORTAL_MAX_ALLOCATION_DAYS} days ahead.")


def _lock_admission(allocation: Allocation) -> Cluster | None:
    """The department chain, then the grant's cluster (the global lock order, after the allocation)."""
    department_chain(department_id=allocation.project.department_id, lock=True)
    if allocation.cluster_id is None:
        return None
    return Cluster.objects.select_for_update(no_key=True).get(pk=allocation.cluster_id)


def _change_request(
    *, actor: User, allocation: Allocation, kind: str, justification: str,
    ends_at: datetime.datetime | None = None, quantity: int | None = None,
) -> AllocationChange:
    waiting = AllocationChange.objects.filter(allocation=allocation, state=ChangeState.PENDING).first()
    if waiting is not None:
        raise Conflict(
            f"Allocation #{allocation.pk} already has a pending {waiting.kind} (change #{waiting.pk}): "
            "it must be decided or withdrawn first.",
            details={"change": waiting.pk},
        )
    change = AllocationChange.objects.create(
        allocation=allocation, kind=kind, ends_at=ends_at, quantity=quantity, justification=justification,
        requested_by=actor,
    )
    allocation_audit(
        actor=actor, action=actions.ALLOCATION_CHANGE_REQUESTED, allocation=allocation, before=None,
        after={}, details=_change_details(change),
    )
    return change


def _change_details(change: AllocationChange, **more: Any) -> dict[str, Any]:
    details: dict[str, Any] = {"change": change.pk, "kind": change.kind, "requested_by": change.requested_by.get_username()}
    if change.ends_at is not None:
        details["ends_at"] = change.ends_at.isoformat()
    if change.quantity is not None:
        details["quantity"] = change.quantity
    if change.justification:
        details["justification"] = change.justification
    return {**details, **more}


@retry_on_deadlock()
def allocation_renew(
    *, actor: User, allocation_id: int, ends_at: datetime.datetime, justification: str = ""
) -> ChangeOutcome:
    """Move the allocation's end to ``ends_at``: at once (admitted over the added interval) within
    the self-service window, else as a pending change."""
    allocation = allocation_lock(allocation_id)
    _require_changer(actor=actor, allocation=allocation)
    if allocation.state != AllocationState.PENDING and allocation.state not in CHANGEABLE_STATES:
        raise TransitionNotAllowed(
            f"Allocation #{allocation.pk} is {allocation.state}; only pending or granted allocations can be renewed.",
            details={"state": allocation.state},
        )
    _check_new_end(allocation=allocation, ends_at=ends_at)
    _check_justification(justification)
    _require_no_reclaim(allocation)
    if allocation.state != AllocationState.PENDING:
        if ends_at > self_renew_until(allocation):
            change = _change_request(
                actor=actor, allocation=allocation, kind=ChangeKind.RENEW, ends_at=ends_at, justification=justification
            )
            return ChangeOutcome(allocation=allocation, change=change, applied=False)
        _lock_admission(allocation)
        refusal = extending.renewal_refusal(allocation=allocation, ends_at=ends_at)
        if refusal is not None:
            raise refusal
    before = allocation_snapshot(allocation)
    allocation.ends_at = ends_at
    allocation.save()
    if allocation.state != AllocationState.PENDING:
        reservations_restamp(allocation_id=allocation.pk)  # its rows hold their GPUs longer
    details = {"justification": justification} if justification else None
    allocation_audit(actor=actor, action=actions.ALLOCATION_RENEWED, allocation=allocation, before=before, details=details)
    return ChangeOutcome(allocation=allocation, change=None, applied=True)


def allocation_units_give_back(*, allocation: Allocation, keep: int, reason: str) -> list[int]:
    """Lower the (locked) grant to ``keep`` units: the live reservations of its highest-numbered
    units beyond them are released (with ``reason``); returns those units. The caller saves the row,
    enqueues its project's push and records the event: a resize, or a partial reclaim
    (``allocations.grants.reclaims``), which admission planned on exactly these units."""
    live = list(live_reservations_on().filter(allocation=allocation).order_by("-unit").values_list("pk", "unit"))
    extra = live[: max(len(live) - keep, 0)]
    reservations.reservations_free(rows=live_reservations_on().filter(pk__in=[pk for pk, _ in extra]), reason=reason)
    allocation.quantity = keep
    return sorted(unit for _, unit in extra)


@retry_on_deadlock()
def allocation_resize(*, actor: User, allocation_id: int, quantity: int, justification: str = "") -> ChangeOutcome:
    """Change the grant's quantity: fewer units at once, more as a pending change."""
    allocation = allocation_lock(allocation_id)
    _require_changer(actor=actor, allocation=allocation)
    if allocation.state not in CHANGEABLE_STATES:
        raise TransitionNotAllowed(
            f"Allocation #{allocation.pk} is {allocation.state}; only a granted allocation can be resized "
            "(a pending request is withdrawn and asked again).",
            details={"state": allocation.state},
        )
    if isinstance(quantity, bool) or not isinstance(quantity, int) or not 1 <= quantity <= QUANTITY_MAX:
        raise FieldError("quantity", f"Must be a whole number from 1 to {QUANTITY_MAX}.")
    if quantity == allocation.quantity:
        raise FieldError("quantity", f"The allocation already has {counted(quantity, 'unit')}.")
    _check_justification(justification)
    _require_no_reclaim(allocation)
    if quantity > allocation.quantity:
        _require_not_ended(allocation)
        change = _change_request(
            actor=actor, allocation=allocation, kind=ChangeKind.RESIZE, quantity=quantity, justification=justification
        )
        return ChangeOutcome(allocation=allocation, change=change, applied=False)
    before = allocation_snapshot(allocation)
    released = allocation_units_give_back(allocation=allocation, keep=quantity, reason="resized")
    allocation.save()
    if allocation.state in ON_CLUSTER_STATES:  # before the event (kernel.locks)
        project_sync_enqueue(project_id=allocation.project_id, cluster_id=allocation.cluster_id)
    details: dict[str, Any] = {"released_units": released}
    if justification:
        details["justification"] = justification
    allocation_audit(actor=actor, action=actions.ALLOCATION_RESIZED, allocation=allocation, before=before, details=details)
    return ChangeOutcome(allocation=allocation, change=None, applied=True)


def _require_not_ended(allocation: Allocation) -> None:
    """Units are added from now to the grant's end: a grant whose end has come (its expiry not
    yet run) has no interval left to add them in, and placing them over an empty interval would
    overlook the grant's own units."""
    if allocation.ends_at <= clock_now():
        raise TransitionNotAllowed(
            f"Allocation #{allocation.pk} ended at {minute_utc(allocation.ends_at)}: no units can be added to it.",
            details={"ends_at": allocation.ends_at.isoformat()},
        )


def _change_lock(change_id: int) -> tuple[AllocationChange, Allocation]:
    """The allocation row first (every writer of its changes holds it), then the change."""
    allocation_id = AllocationChange.objects.values_list("allocation_id", flat=True).get(pk=change_id)
    allocation = allocation_lock(allocation_id)
    change = AllocationChange.objects.select_for_update(of=("self",)).select_related("requested_by").get(pk=change_id)
    return change, allocation


def _require_pending(change: AllocationChange) -> None:
    if change.state != ChangeState.PENDING:
        raise TransitionNotAllowed(
            f"Change #{change.pk} is {change.state}; only a pending change can be decided or withdrawn.",
            details={"state": change.state},
        )


def allocation_change_approve(*, actor: User, change_id: int, comment: str = "") -> AllocationChange:
    """Approve and apply a pending change, admitted under the locks; a refusal by admission is
    itself audited (as denied), once the approval's transaction has rolled back."""
    reservations.placement_engine_warm()
    try:
        return _allocation_change_approve(actor=actor, change_id=change_id, comment=comment)
    except (QuotaExceeded, CapacityExceeded) as refusal:
        _record_change_denied(actor=actor, change_id=change_id, refusal=refusal)
        raise


def _apply_renewal(*, allocation: Allocation, change: AllocationChange) -> dict[str, Any]:
    assert change.ends_at is not None  # a renewal (the model's check constraint)
    if change.ends_at <= allocation.ends_at:
        raise Conflict(
            f"Allocation #{allocation.pk} already ends {minute_utc(allocation.ends_at)}, not before the change's end.",
            details={"ends_at": allocation.ends_at.isoformat()},
        )
    refusal = extending.renewal_refusal(allocation=allocation, ends_at=change.ends_at)
    if refusal is not None:
        raise refusal
    allocation.ends_at = change.ends_at
    reservations_restamp(allocation_id=allocation.pk)  # its rows hold their GPUs longer
    return {}


def _apply_raise(*, actor: User, allocation: Allocation, change: AllocationChange, cluster: Cluster | None) -> dict[str, Any]:
    assert change.quantity is not None  # a resize (the model's check constraint)
    if change.quantity <= allocation.quantity:
        raise Conflict(
            f"Allocation #{allocation.pk} already has {counted(allocation.quantity, 'unit')}: the change adds none.",
            details={"quantity": allocation.quantity},
        )
    if cluster is None:
        raise Conflict(f"Allocation #{allocation.pk} has no cluster to add units on.")
    _require_not_ended(allocation)
    start = max(clock_now(), allocation.starts_at)
    refusal = extending.quota_refusal(
        allocation=allocation, quantity=change.quantity, starts_at=start, ends_at=allocation.ends_at
    )
    if refusal is not None:
        raise refusal
    workload = reservations.placement_workload(include=allocation.flavor)
    reservations.reservations_adopt(cluster=cluster, workload=workload, actor=actor, skip=allocation.pk)
    attempt = extending.added_units_attempt(
        allocation=allocation, cluster=cluster, added=change.quantity - allocation.quantity, starts_at=start
    )
    if not attempt.complete:
        raise extending.raise_refusal(allocation=allocation, attempt=attempt)
    units = live_reservations_on().filter(allocation=allocation).values_list("unit", flat=True)
    first = max(units, default=-1) + 1
    reservations.reservations_store(allocation=allocation, attempt=attempt, first_unit=first)
    allocation.quantity = change.quantity
    return {"placement": attempt.where(), "first_unit": first}


@retry_on_deadlock()
def _allocation_change_approve(*, actor: User, change_id: int, comment: str) -> AllocationChange:
    change, allocation = _change_lock(change_id)
    _require_change_decider(actor=actor, allocation=allocation, change=change)
    _require_pending(change)
    if allocation.state not in CHANGEABLE_STATES:
        raise TransitionNotAllowed(
            f"Allocation #{allocation.pk} is {allocation.state}; a change applies only to a granted allocation.",
            details={"state": allocation.state},
        )
    _require_no_reclaim(allocation)
    before = allocation_snapshot(allocation)
    cluster = _lock_admission(allocation)
    if change.kind == ChangeKind.RENEW:
        applied = _apply_renewal(allocation=allocation, change=change)
    else:
        applied = _apply_raise(actor=actor, allocation=allocation, change=change, cluster=cluster)
    allocation.save()
    now = clock_now()
    change.state = ChangeState.APPROVED
    change.decided_by = actor
    change.decided_at = now
    change.decision_comment = comment
    change.save()
    if change.kind == ChangeKind.RESIZE and allocation.state in ON_CLUSTER_STATES:  # before the event
        project_sync_enqueue(project_id=allocation.project_id, cluster_id=allocation.cluster_id)
    allocation_audit(
        actor=actor, action=actions.ALLOCATION_CHANGE_APPROVED, allocation=allocation, before=before,
        details=_change_details(change, comment=comment, **applied),
    )
    return change


@transaction.atomic
def _record_change_denied(*, actor: User, change_id: int, refusal: QuotaExceeded | CapacityExceeded) -> None:
    change = AllocationChange.objects.select_related("allocation__project").get(pk=change_id)
    audit_record(
        actor=actor, action=actions.ALLOCATION_ADMISSION_DENIED, target=change.allocation,
        department_id=change.allocation.project.department_id,
        details={"change": change.pk, "kind": change.kind, **extending.refusal_details(refusal)},
        outcome=Outcome.DENIED,
    )


@retry_on_deadlock()
def allocation_change_reject(*, actor: User, change_id: int, comment: str) -> AllocationChange:
    change, allocation = _change_lock(change_id)
    _require_change_decider(actor=actor, allocation=allocation, change=change)
    _require_pending(change)
    if not comment.strip():
        raise FieldError("comment", "A rejection needs a comment for the requester.")
    change.state = ChangeState.REJECTED
    change.decided_by = actor
    change.decided_at = clock_now()
    change.decision_comment = comment
    change.save()
    allocation_audit(
        actor=actor, action=actions.ALLOCATION_CHANGE_REJECTED, allocation=allocation, before=None, after={},
        details=_change_details(change, comment=comment),
    )
    return change


@retry_on_deadlock()
def allocation_change_cancel(*, actor: User, change_id: int) -> AllocationChange:
    """Withdraw a pending change (its requester, the project's members, the department's admins);
    ``decided_by`` records who withdrew it."""
    change, allocation = _change_lock(change_id)
    if change.requested_by_id != actor.pk:
        _require_changer(actor=actor, allocation=allocation)
    _require_pending(change)
    change.state = ChangeState.CANCELLED
    change.decided_by = actor
    change.decided_at = clock_now()
    change.save()
    allocation_audit(
        actor=actor, action=actions.ALLOCATION_CHANGE_CANCELLED, allocation=allocation, before=None, after={},
        details=_change_details(change),
    )
    return change


def allocation_change_list(
    *, user: AbstractBaseUser | AnonymousUser, state: str | None = None, allocation_id: int | None = None
) -> QuerySet[AllocationChange]:
    """The changes of the allocations ``user`` may read, newest first."""
    access = access_for(user)
    queryset = AllocationChange.objects.select_related("allocation__project", "requested_by", "decided_by")
    if not access.reads_everything:
        queryset = queryset.filter(allocation__project__department_id__in=access.readable)
    if state:
        queryset = queryset.filter(state=state)
    if allocation_id is not None:
        queryset = queryset.filter(allocation_id=allocation_id)
    return queryset.order_by("-created_at", "-id")


def allocation_change_get(*, user: AbstractBaseUser | AnonymousUser, change_id: int) -> AllocationChange:
    try:
        return allocation_change_list(user=user).get(pk=change_id)
    except AllocationChange.DoesNotExist:
        raise Http404("No such allocation change.") from None

"""Allocation workflow: request, decide, provision, release, expire (renewal and resize:
``allocations.grants.changes``).

Every service runs in one transaction that also writes its audit event; cluster pushes are
enqueued with ``transaction.on_commit`` so a rolled-back decision never reaches a cluster.

Locks follow the global order of :mod:`kernel.locks`: the allocation, its department chain, the
candidate clusters, and the audit chain lock last. So the outbox rows of a push (which refer to the
cluster and the project) are written before the audit event, and the services a deadlock can hit
(deciding, releasing, expiring, provisioning) run again when PostgreSQL picks them as its victim.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction

from allocations.admission.planning import Decision, admission_decide
from allocations.booking import reservations
from allocations.booking.preview import candidate_clusters
from allocations.booking.state import ClusterState, cluster_state
from allocations.catalogue.selectors import allocation_may_change
from allocations.catalogue.states import FINAL_STATES, HOLDING_STATES, can_transition
from allocations.grants.notices import allocation_insert_notified, allocation_notify
from allocations.grants.reclaims import reclaims_start, victims_lock
from allocations.grants.transitions import (
    allocation_audit,
    allocation_lock,
    allocation_move,
    allocation_snapshot,
    pending_changes_close,
    pending_changes_closed_audit,
    project_sync_enqueue,
    provision_enqueue,
)
from allocations.models import Allocation, AllocationState, Flavor, PriorityClass
from audit import actions
from audit.models import Outcome
from audit.services import audit_record
from clusters.models import Cluster
from kernel.clock import clock_now
from kernel.errors import (
    ApplicationError,
    CapacityExceeded,
    Conflict,
    FieldError,
    FourEyes,
    NotAllowed,
    QuotaExceeded,
    TransitionNotAllowed,
)
from kernel.locks import rows_key_share
from kernel.transactions import retry_on_deadlock
from notifications import events
from placement import Workload
from tenants.access import access_for, department_chain
from tenants.models import Project
from tenants.selectors import project_is_member

_snapshot = allocation_snapshot
_audit = allocation_audit
_move = allocation_move
_lock = allocation_lock
_enqueue_provision = provision_enqueue
_enqueue_project_sync = project_sync_enqueue


def _validate_period(*, starts_at: datetime.datetime, ends_at: datetime.datetime, field: str = "ends_at") -> None:
    """The end after the start, the allocation no longer than the longest allowed, and the start no
    further ahead than ``GPUPORTAL_MAX_START_AHEAD_DAYS`` (a grant is booked, ``scheduled``, from
    approval to its start: admission over its interval, docs/quotas.md)."""
    ahead = datetime.timedelta(days=settings.GPUPORTAL_MAX_START_AHEAD_DAYS)
    if starts_at - clock_now() > ahead:
        raise FieldError(
            "starts_at", f"An allocation may start at most {settings.GPUPORTAL_MAX_START_AHEAD_DAYS} days ahead."
        )
    if ends_at <= starts_at:
        raise FieldError(field, "The end must be after the start.")
    longest = datetime.timedelta(days=settings.GPUPORTAL_MAX_ALLOCATION_DAYS)
    if ends_at - starts_at > longest:
        raise FieldError(field, f"An allocation may last at most {settings.GPUPORTAL_MAX_ALLOCATION_DAYS} days.")


def allocation_request_allowed(*, actor: User, project: Project, remember: bool = False) -> bool:
    """Whether ``actor`` may request for ``project``: a member of it or an admin of its department.
    ``remember`` keeps the answer on this ``project`` object (the view's, read from the request's
    body, checked before the rest of the body is read), so the service's own check of the same
    object costs no second query."""
    if access_for(actor).can_administer_department(project.department_id):
        return True
    known: dict[int, bool] = project.__dict__.get("_gpuportal_requesters", {})
    if actor.pk in known:
        return known[actor.pk]
    member = project_is_member(project=project, user=actor)
    if remember:
        project.__dict__.setdefault("_gpuportal_requesters", {})[actor.pk] = member
    return member


@transaction.atomic
def allocation_request(
    *,
    actor: User,
    project: Project,
    flavor: Flavor,
    quantity: int,
    priority_class: PriorityClass,
    starts_at: datetime.datetime | None,
    ends_at: datetime.datetime,
    justification: str,
    cluster: Cluster | None = None,
) -> Allocation:
    access = access_for(actor)
    if not access.can_read_department(project.department_id):
        raise FieldError("project", "No such project.")
    if not allocation_request_allowed(actor=actor, project=project):
        raise NotAllowed(f"You are not a member of project {project.slug}.")
    if not flavor.is_active:
        raise FieldError("flavor", f"Flavor {flavor.name} is not available for new requests.")
    if isinstance(quantity, bool) or not isinstance(quantity, int) or quantity < 1:
        raise FieldError("quantity", "Must be a whole number of at least 1.")
    if cluster is not None and not cluster.is_active:
        raise FieldError("cluster", f"Cluster {cluster.name} does not accept new allocations.")
    now = clock_now()
    start = starts_at or now
    if start < now - datetime.timedelta(minutes=5):
        raise FieldError("starts_at", "The start may not be in the past.")
    _validate_period(starts_at=start, ends_at=ends_at)
    # The class may be removed by a platform admin meanwhile: hold it (KEY SHARE, as the allocation's
    # foreign key will) so that the removal waits for this request and then refuses, and check it is
    # still there.
    locked = rows_key_share(connection, PriorityClass, [priority_class.pk])
    if not (priority_class.pk in locked if locked is not None else PriorityClass.objects.filter(pk=priority_class.pk).exists()):
        raise FieldError("priority_class", f"Priority class {priority_class.name} no longer exists.")
    allocation = Allocation(
        project=project,
        flavor=flavor,
        quantity=quantity,
        priority_class=priority_class,
        cluster=cluster,
        starts_at=start,
        ends_at=ends_at,
        justification=justification,
        requested_by=actor,
    )
    # The related objects were loaded and checked above and the database enforces the check
    # constraints: validating fields only saves nine queries on the busiest write path.
    allocation.full_clean(
        exclude=["project", "flavor", "priority_class", "cluster", "requested_by"], validate_constraints=False
    )
    allocation_insert_notified(events.SUBMITTED, allocation, requested_by=actor.get_username(), justification=justification[:1000])
    _audit(
        actor=actor,
        action=actions.ALLOCATION_REQUESTED,
        allocation=allocation,
        before=None,
        details={"justification": justification, "gpu_equivalents": str(flavor.gpu_equivalents_for(quantity))},
    )
    return allocation


def _require_decider(*, actor: User, allocation: Allocation) -> None:
    if not access_for(actor).can_administer_department(allocation.project.department_id):
        raise NotAllowed("Only an admin of the allocation's department may decide on it.")
    if settings.GPUPORTAL_FOUR_EYES and allocation.requested_by_id == actor.pk:
        raise FourEyes(
            "Nobody decides on their own request: another admin of the department must.",
            details={"requested_by": actor.get_username()},
        )


def _candidate_clusters(*, allocation: Allocation) -> list[Cluster]:
    """The clusters to try, row-locked in primary-key order."""
    candidates = candidate_clusters(flavor=allocation.flavor, cluster=allocation.cluster)
    return list(Cluster.objects.select_for_update(no_key=True).filter(pk__in=candidates.values("pk")).order_by("pk"))


def allocation_approve(*, actor: User, allocation_id: int, comment: str = "") -> Allocation:
    """Approve within quota and capacity, reclaiming what the request may take when it needs it
    (``docs/quotas.md``). A refusal by admission is itself audited (as denied), in a transaction of
    its own once the approval's has rolled back."""
    reservations.placement_engine_warm()
    try:
        return _allocation_approve(actor=actor, allocation_id=allocation_id, comment=comment)
    except (QuotaExceeded, CapacityExceeded) as refusal:
        _record_admission_denied(actor=actor, allocation_id=allocation_id, refusal=refusal)
        raise


VICTIM_LOCK_TRIES = 3


def _decide_and_lock_victims(
    *, allocation: Allocation, clusters: list[Cluster], states: dict[int, ClusterState], workload: Workload
) -> tuple[Decision, dict[int, Allocation]]:
    """Plan the admission, then lock its victims (SKIP LOCKED); plan again without those another
    transaction holds or that stopped holding, a few times."""
    untakeable: set[int] = set()
    for _ in range(VICTIM_LOCK_TRIES):
        decision = admission_decide(allocation=allocation, clusters=clusters, untakeable=untakeable, states=states,
                                    workload=workload)
        if decision.refusal is not None:
            raise decision.refusal
        wanted = {victim.allocation_id for victim in decision.victims}
        rows = victims_lock(ids=wanted) if wanted else {}
        if len(rows) == len(wanted):
            return decision, rows
        untakeable |= wanted - set(rows)
    raise Conflict(
        f"Allocation #{allocation.pk}: the grants it must reclaim are being changed right now; try again.",
        details={"busy": sorted(untakeable)},
    )


@retry_on_deadlock()
def _allocation_approve(*, actor: User, allocation_id: int, comment: str) -> Allocation:
    allocation = _lock(allocation_id)
    _require_decider(actor=actor, allocation=allocation)
    before = _snapshot(allocation)
    if allocation.state != AllocationState.PENDING:  # a scheduled grant was decided already: it moves by the clock
        raise TransitionNotAllowed(
            f"Allocation #{allocation.pk} is {allocation.state}; only a pending request can be approved.",
            details={"state": allocation.state, "target": AllocationState.APPROVED},
        )
    department_chain(department_id=allocation.project.department_id, lock=True)
    clusters = _candidate_clusters(allocation=allocation)
    workload = reservations.placement_workload(include=allocation.flavor)
    # Each cluster's kept placement state, brought to the version its locked row holds (again after
    # booking grants that were made before placement existed, if any).
    states = {cluster.pk: cluster_state(cluster=cluster, locked=True) for cluster in clusters}
    for cluster in clusters:
        if reservations.reservations_adopt(cluster=cluster, workload=workload, actor=actor, skip=allocation.pk,
                                           state=states[cluster.pk]):
            cluster.refresh_from_db(fields=["placement_version"])
            states[cluster.pk] = cluster_state(cluster=cluster, locked=True)
    decision, victim_rows = _decide_and_lock_victims(allocation=allocation, clusters=clusters, states=states,
                                                     workload=workload)
    attempt = decision.attempt
    assert attempt is not None  # admitted
    reservations.reservations_store(allocation=allocation, attempt=attempt)
    now = clock_now()
    waiting, victim_events = reclaims_start(
        actor=actor, requester=allocation, victims=decision.victims, rows=victim_rows, now=now
    )
    later = allocation.starts_at > now or waiting
    _move(allocation, AllocationState.SCHEDULED if later else AllocationState.APPROVED)
    allocation.cluster = attempt.cluster
    allocation.decided_by = actor
    allocation.decided_at = now
    allocation.decision_comment = comment
    allocation.original_ends_at = allocation.ends_at
    allocation.save()
    if not later:
        _enqueue_provision(allocation.pk)  # before the events: the outbox rows' key checks wait before the chain lock
    for write in victim_events:
        write()
    details: dict[str, Any] = {
        "comment": comment,
        "requested_by": allocation.requested_by.get_username(),
        "quota_checks": decision.checks,
        "placement": attempt.where(),
    }
    if decision.victims:
        details["reclaimed"] = [victim.as_details() for victim in decision.victims]
    if later:
        details["starts"] = "after its victims' notice" if waiting else allocation.starts_at.isoformat()
    allocation_notify(events.DECIDED, allocation, decision="approved", decided_by=actor.get_username(), comment=comment)
    _audit(actor=actor, action=actions.ALLOCATION_APPROVED, allocation=allocation, before=before, details=details)
    return allocation


@transaction.atomic
def _record_admission_denied(*, actor: User, allocation_id: int, refusal: ApplicationError) -> None:
    allocation = Allocation.objects.select_related("project").get(pk=allocation_id)
    audit_record(
        actor=actor,
        action=actions.ALLOCATION_ADMISSION_DENIED,
        target=allocation,
        department_id=allocation.project.department_id,
        details={"code": refusal.code, "message": refusal.message, **refusal.details},
        outcome=Outcome.DENIED,
    )


@transaction.atomic
def allocation_reject(*, actor: User, allocation_id: int, comment: str) -> Allocation:
    allocation = _lock(allocation_id)
    _require_decider(actor=actor, allocation=allocation)
    if not comment.strip():
        raise FieldError("comment", "A rejection needs a comment for the requester.")
    before = _snapshot(allocation)
    _move(allocation, AllocationState.REJECTED)
    allocation.decided_by = actor
    allocation.decided_at = clock_now()
    allocation.decision_comment = comment
    allocation.save()
    allocation_notify(events.DECIDED, allocation, decision="rejected", decided_by=actor.get_username(), comment=comment)
    _audit(actor=actor, action=actions.ALLOCATION_REJECTED, allocation=allocation, before=before, details={"comment": comment})
    return allocation


def _require_owner_or_admin(*, actor: User, allocation: Allocation) -> None:
    if allocation_may_change(user=actor, allocation=allocation):
        return
    raise NotAllowed("Only the project's members or the department's admins may change this allocation.")


@retry_on_deadlock()
def allocation_release(*, actor: User, allocation_id: int, comment: str = "") -> Allocation:
    """End an allocation early; a pending one is withdrawn (cancelled) instead."""
    allocation = _lock(allocation_id)
    _require_owner_or_admin(actor=actor, allocation=allocation)
    before = _snapshot(allocation)
    was_holding = allocation.state in HOLDING_STATES
    if allocation.state == AllocationState.PENDING:
        _move(allocation, AllocationState.CANCELLED)
        action = actions.ALLOCATION_CANCELLED
    else:
        _move(allocation, AllocationState.RELEASED)
        action = actions.ALLOCATION_RELEASED
    allocation.save()
    reservations.reservations_release(allocation=allocation, reason="released")
    closed = pending_changes_close(allocation=allocation, why=f"the grant was {allocation.state}")
    if was_holding:  # before the event: the outbox rows' key checks wait before the chain lock
        _enqueue_project_sync(project_id=allocation.project_id, cluster_id=allocation.cluster_id)
    _audit(actor=actor, action=action, allocation=allocation, before=before, details={"comment": comment} if comment else None)
    pending_changes_closed_audit(actor=actor, allocation=allocation, ids=closed, why=f"the grant was {allocation.state}")
    return allocation


def allocations_expire(*, now: datetime.datetime | None = None) -> int:
    """Expire every allocation whose end has passed; returns how many. Each in its own transaction."""
    moment = now or clock_now()
    due = list(
        Allocation.objects.filter(ends_at__lte=moment)
        .exclude(state__in=FINAL_STATES)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    expired = 0
    for allocation_id in due:
        if allocation_expire(allocation_id=allocation_id, now=moment):
            expired += 1
    return expired


@retry_on_deadlock()
def allocation_expire(*, allocation_id: int, now: datetime.datetime) -> bool:
    allocation = _lock(allocation_id)
    if allocation.ends_at > now or not can_transition(allocation.state, AllocationState.EXPIRED):
        return False
    before = _snapshot(allocation)
    was_holding = allocation.state in HOLDING_STATES
    allocation.state = AllocationState.EXPIRED
    allocation.save()
    reservations.reservations_release(allocation=allocation, reason="expired")
    closed = pending_changes_close(allocation=allocation, why="the grant expired")
    if was_holding:  # before the event, as in allocation_release
        _enqueue_project_sync(project_id=allocation.project_id, cluster_id=allocation.cluster_id)
    allocation_notify(events.EXPIRED, allocation, was=before["state"])
    _audit(actor=None, action=actions.ALLOCATION_EXPIRED, allocation=allocation, before=before)
    pending_changes_closed_audit(actor=None, allocation=allocation, ids=closed, why="the grant expired")
    return True


@retry_on_deadlock()
def allocation_provision_start(*, allocation_id: int) -> Allocation | None:
    """Claim an approved (or failed, on retry) allocation for provisioning; None when nothing to do."""
    allocation = _lock(allocation_id)
    if allocation.state not in (AllocationState.APPROVED, AllocationState.FAILED, AllocationState.PROVISIONING):
        return None
    if allocation.state != AllocationState.PROVISIONING:
        before = _snapshot(allocation)
        _move(allocation, AllocationState.PROVISIONING)
        allocation.failure_reason = ""
        allocation.save()
        _audit(actor=None, action=actions.ALLOCATION_PROVISIONING, allocation=allocation, before=before)
    return allocation


@retry_on_deadlock()
def allocation_provision_succeeded(*, allocation_id: int) -> Allocation:
    """The push landed: a provisioning allocation becomes active. One whose push landed before its
    own worker claimed it (approved, or failed and retried) passes through provisioning in the same
    write, with both events: updating the row twice in one transaction would make PostgreSQL check
    its foreign keys again, and wait for their rows, while this transaction holds the chain lock."""
    allocation = _lock(allocation_id)
    before = _snapshot(allocation)
    passes_through = allocation.state in (AllocationState.APPROVED, AllocationState.FAILED)
    if passes_through:
        _move(allocation, AllocationState.PROVISIONING)
        allocation.failure_reason = ""
    if allocation.state != AllocationState.PROVISIONING:
        return allocation
    provisioning = _snapshot(allocation)
    _move(allocation, AllocationState.ACTIVE)
    allocation.save()
    if passes_through:
        _audit(actor=None, action=actions.ALLOCATION_PROVISIONING, allocation=allocation, before=before, after=provisioning)
    _audit(actor=None, action=actions.ALLOCATION_ACTIVATED, allocation=allocation, before=provisioning)
    return allocation


@retry_on_deadlock()
def allocation_provision_failed(*, allocation_id: int, reason: str) -> Allocation:
    allocation = _lock(allocation_id)
    if allocation.state != AllocationState.PROVISIONING:
        return allocation
    before = _snapshot(allocation)
    _move(allocation, AllocationState.FAILED)
    allocation.failure_reason = reason[:4000]
    allocation.save()
    _audit(
        actor=None,
        action=actions.ALLOCATION_FAILED,
        allocation=allocation,
        before=before,
        details={"reason": reason[:4000]},
        outcome=Outcome.FAILURE,
    )
    return allocation


@transaction.atomic
def allocation_retry(*, actor: User, allocation_id: int) -> Allocation:
    """Retry provisioning of a failed allocation (department admins and platform admins)."""
    allocation = _lock(allocation_id)
    _require_decider(actor=actor, allocation=allocation)
    if allocation.state != AllocationState.FAILED:
        raise TransitionNotAllowed(
            f"Allocation #{allocation.pk} is {allocation.state}; only failed allocations can be retried.",
            details={"state": allocation.state},
        )
    _enqueue_provision(allocation.pk)
    return allocation

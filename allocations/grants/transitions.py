"""What every allocation service shares: locking a row, moving its state, recording the move, and
enqueueing the cluster pushes that follow it (before the event: see ``kernel.locks``)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User

from allocations.catalogue.states import can_transition
from allocations.models import Allocation, AllocationChange, ChangeState
from audit import actions
from audit.actions import AuditAction
from audit.models import Outcome
from audit.services import audit_record
from clusters.outbox import push_enqueue
from kernel.clock import clock_now
from kernel.errors import TransitionNotAllowed


def allocation_snapshot(allocation: Allocation) -> dict[str, Any]:
    return {
        "state": allocation.state,
        "quantity": allocation.quantity,
        "flavor": allocation.flavor.name,
        "project": allocation.project.slug,
        "priority_class": allocation.priority_class.name,
        "cluster": allocation.cluster.name if allocation.cluster else None,
        "starts_at": allocation.starts_at.isoformat(),
        "ends_at": allocation.ends_at.isoformat(),
    }


def allocation_audit(
    *,
    actor: User | None,
    action: AuditAction,
    allocation: Allocation,
    before: dict[str, Any] | None,
    details: dict[str, Any] | None = None,
    outcome: str = Outcome.SUCCESS,
    after: dict[str, Any] | None = None,
) -> None:
    """Record ``action`` on the allocation with what changed since ``before`` (everything when None)."""
    after = after if after is not None else allocation_snapshot(allocation)
    changed_before = {key: value for key, value in (before or {}).items() if after.get(key) != value}
    changed_after = {key: after[key] for key in changed_before} if before is not None else after
    audit_record(
        actor=actor,
        action=action,
        target=allocation,
        department_id=allocation.project.department_id,
        before=changed_before,
        after=changed_after,
        details=details,
        outcome=outcome,
    )


def allocation_move(allocation: Allocation, target: str) -> None:
    if not can_transition(allocation.state, target):
        raise TransitionNotAllowed(
            f"Allocation #{allocation.pk} is {allocation.state}; it cannot become {target}.",
            details={"state": allocation.state, "target": target},
        )
    allocation.state = target


def allocation_lock(allocation_id: int) -> Allocation:
    return Allocation.objects.select_for_update(of=("self",), no_key=True).select_related(
        "project", "flavor", "priority_class", "cluster"
    ).get(pk=allocation_id)


def provision_enqueue(allocation_id: int) -> None:
    """Outbox rows in this transaction: the allocation's project, then the cluster-wide objects
    (its MIG layout, priority classes); a worker picks them up once the transaction commits."""
    allocation = Allocation.objects.only("project_id", "cluster_id").get(pk=allocation_id)
    if allocation.cluster_id is None:
        return
    push_enqueue(cluster_id=allocation.cluster_id, project_id=allocation.project_id, allocation_id=allocation_id)
    push_enqueue(cluster_id=allocation.cluster_id, project_id=None)


def project_sync_enqueue(*, project_id: int, cluster_id: int | None) -> None:
    if cluster_id is None:
        return
    push_enqueue(cluster_id=cluster_id, project_id=project_id)
    push_enqueue(cluster_id=cluster_id, project_id=None)


def pending_changes_close(*, allocation: Allocation, why: str) -> list[int]:
    """Withdraw the allocation's pending change (a grant that ends or is being reclaimed takes no
    renewal or resize); returns the ids closed, for the caller's audit event."""
    ids = list(
        AllocationChange.objects.filter(allocation=allocation, state=ChangeState.PENDING).values_list("pk", flat=True)
    )
    if ids:
        AllocationChange.objects.filter(pk__in=ids).update(
            state=ChangeState.CANCELLED, decided_at=clock_now(), decision_comment=why
        )
    return ids


def pending_changes_closed_audit(*, actor: User | None, allocation: Allocation, ids: list[int], why: str) -> None:
    if ids:
        allocation_audit(
            actor=actor, action=actions.ALLOCATION_CHANGE_CANCELLED, allocation=allocation, before=None, after={},
            details={"changes": ids, "why": why},
        )

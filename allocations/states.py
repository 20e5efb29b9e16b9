"""The allocation state machine: every allowed transition, and nothing else."""

from __future__ import annotations

from allocations.models import AllocationState as S

ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.APPROVED, S.REJECTED, S.CANCELLED, S.EXPIRED}),
    S.APPROVED: frozenset({S.PROVISIONING, S.RELEASED, S.EXPIRED}),
    S.PROVISIONING: frozenset({S.ACTIVE, S.FAILED, S.RELEASED, S.EXPIRED}),
    S.ACTIVE: frozenset({S.RELEASED, S.EXPIRED}),
    S.FAILED: frozenset({S.PROVISIONING, S.RELEASED, S.EXPIRED}),
    S.REJECTED: frozenset(),
    S.CANCELLED: frozenset(),
    S.RELEASED: frozenset(),
    S.EXPIRED: frozenset(),
}

# States whose allocations hold quota and capacity (and appear in the cluster's ResourceQuota).
HOLDING_STATES: frozenset[str] = frozenset({S.APPROVED, S.PROVISIONING, S.ACTIVE, S.FAILED})


def can_transition(current: str, target: str) -> bool:
    return target in ALLOWED_TRANSITIONS.get(current, frozenset())

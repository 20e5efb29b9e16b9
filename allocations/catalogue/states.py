"""The allocation state machine: every allowed transition, and nothing else.

A grant whose start is ahead is ``scheduled``: it holds its booking, nothing is on the cluster.
A grant chosen to make room for another (``docs/quotas.md``) is ``reclaiming`` until its notice
deadline, then ``reclaimed``; if the request it made room for is gone before then, the reclaim is
called off and the grant goes back to the state it had (``reclaim_from_state``). A grant that gives
back only some of its units keeps its state: ``reclaim_units`` says how many go at the deadline.
"""

from __future__ import annotations

from django.db.models import Q

from allocations.models import AllocationState as S

_RECLAIMABLE = {S.RECLAIMING}
_RESTORABLE = {S.APPROVED, S.PROVISIONING, S.ACTIVE, S.FAILED}  # a reclaim called off: the state it had

ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.APPROVED, S.SCHEDULED, S.REJECTED, S.CANCELLED, S.EXPIRED}),
    S.SCHEDULED: frozenset({S.APPROVED, S.RELEASED, S.EXPIRED, *_RECLAIMABLE}),
    S.APPROVED: frozenset({S.PROVISIONING, S.RELEASED, S.EXPIRED, *_RECLAIMABLE}),
    S.PROVISIONING: frozenset({S.ACTIVE, S.FAILED, S.RELEASED, S.EXPIRED, *_RECLAIMABLE}),
    S.ACTIVE: frozenset({S.RELEASED, S.EXPIRED, *_RECLAIMABLE}),
    S.FAILED: frozenset({S.PROVISIONING, S.RELEASED, S.EXPIRED, *_RECLAIMABLE}),
    S.RECLAIMING: frozenset({S.RECLAIMED, S.RELEASED, S.EXPIRED, *_RESTORABLE}),
    S.REJECTED: frozenset(),
    S.CANCELLED: frozenset(),
    S.RELEASED: frozenset(),
    S.EXPIRED: frozenset(),
    S.RECLAIMED: frozenset(),
}

# States whose allocations hold quota and capacity (bookings included) over their interval.
HOLDING_STATES: frozenset[str] = frozenset(
    {S.SCHEDULED, S.APPROVED, S.PROVISIONING, S.ACTIVE, S.FAILED, S.RECLAIMING}
)

# States whose allocations are (or are being put) on the cluster: its ResourceQuota counts them.
# A scheduled grant is not there yet; a reclaiming one keeps running until its notice ends.
ON_CLUSTER_STATES: frozenset[str] = frozenset({S.APPROVED, S.PROVISIONING, S.ACTIVE, S.FAILED, S.RECLAIMING})

# Grants that may be chosen as victims of a reclaim or a preemption.
RECLAIMABLE_STATES: frozenset[str] = HOLDING_STATES - {S.RECLAIMING}

# States that end an allocation for good.
FINAL_STATES: frozenset[str] = frozenset({S.REJECTED, S.CANCELLED, S.RELEASED, S.EXPIRED, S.RECLAIMED})


def can_transition(current: str, target: str) -> bool:
    return target in ALLOWED_TRANSITIONS.get(current, frozenset())


def reclaim_pending_q() -> Q:
    """The grants a reclaim is under way for: ``reclaiming`` (all of it), or holding with
    ``reclaim_units`` set (some of its units, at ``reclaim_deadline``)."""
    return Q(state=S.RECLAIMING) | Q(reclaim_units__isnull=False, state__in=HOLDING_STATES - {S.RECLAIMING})

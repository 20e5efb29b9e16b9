"""The order waiting requests stand in, one rule wherever it shows, pure (no Django).

A request comes before another when its priority class is higher; among equal priorities, when
its department's fair-share factor is higher (``allocations.fair_share.tree``: 1.0 is the
department least served for its shares); then the older first, then the lower id (a line number
in the twin). The approvals queue lists requests in this order (``allocations.fair_share.reads
.pending_in_queue_order``, the same order in SQL), the why answer counts the requests ahead in it,
and the policy twin's pass tries waiting requests in it (``twin.replay.engine``), as the victim
choice takes from the lowest priority first and, among equals, from the department furthest over
its share (``allocations.quotas.victims``).

A department without a factor (fair share not ticked yet, or no shares) weighs ``NO_FACTOR``: the
factor of the least served, as if nobody had used anything.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TypeVar

NO_FACTOR = 1.0
S = TypeVar("S", float, datetime.datetime)  # when it was submitted: seconds (the twin) or an instant


def queue_key(*, priority: int, factor: float, submitted: S, tiebreak: int) -> tuple[int, float, S, int]:
    """The sort key of a waiting request: smaller comes first."""
    return (-priority, -factor, submitted, tiebreak)


def factor_of(factors: Mapping[int, float], department_id: int) -> float:
    """A department's factor in the queue (``NO_FACTOR`` where it has none)."""
    return factors.get(department_id, NO_FACTOR)

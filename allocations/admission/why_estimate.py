"""When a refused request would fit: the earliest of the moments where what holds or a limit
changes (a grant's end, a scheduled start, a reclaim's deadline, a quota window's edge) at which
admission itself (``planning.admission_decide``) would admit the same request moved there, for
the same duration.

Nothing is recomputed by a rule of its own: each moment tried is admission's verdict on the
request as if it started then, from the current state. The moments are searched by halving
(admission over later starts is taken to be monotone: grants only end as time passes, unless a
scheduled one starts), so a wait costs a handful of decisions however many grants there are.
"""

from __future__ import annotations

import dataclasses
import datetime
from bisect import bisect_left
from collections.abc import Callable

from allocations.admission.planning import Decision
from allocations.catalogue.states import HOLDING_STATES
from allocations.models import Allocation
from allocations.quotas import windows
from allocations.quotas.effective_tree import QuotaView
from kernel.clock import clock_now
from tenants.access import department_ancestor_ids, department_parent_map, department_subtree_ids

HORIZON = datetime.timedelta(days=30)
"""How far ahead a start is looked for."""
MOMENTS = 256
"""The most moments kept to search among (the nearest ones)."""
WINDOW_BEGINS = 4
"""The most quota windows' begins tried one by one (the nearest ones)."""

Decide = Callable[[Allocation], Decision]


@dataclasses.dataclass(frozen=True)
class Estimate:
    """The earliest start found (None: none within the horizon), how it was found, and how far to trust it."""

    starts_at: datetime.datetime | None
    basis: str
    reliability: str
    tried: int = 0

    def as_dict(self) -> dict[str, object]:
        return {"starts_at": self.starts_at.isoformat() if self.starts_at else None, "basis": self.basis,
                "reliability": self.reliability, "decisions_tried": self.tried}


def change_moments(
    *, allocation: Allocation, cluster_ids: list[int], now: datetime.datetime, parents: dict[int, int | None] | None = None
) -> tuple[list[datetime.datetime], list[datetime.datetime]]:
    """Every moment within the horizon where what the request meets may change: the ends and
    starts of the grants of its quota tree or on its clusters, reclaims' deadlines and the ends of
    approved quota windows; and, apart, the begins of approved quota windows (where a limit may
    rise for a while only: the one thing that makes a later start not always better). Two queries
    (three without ``parents``, the department tree)."""
    parents = parents if parents is not None else department_parent_map()
    chain = department_ancestor_ids(department_id=allocation.project.department_id, parents=parents)
    tree_ids = department_subtree_ids(root_ids=[chain[-1]], parents=parents)
    horizon = now + HORIZON
    rows = Allocation.objects.filter(state__in=HOLDING_STATES, ends_at__gt=now, starts_at__lt=horizon).filter(
        project__department_id__in=sorted(tree_ids)
    ) | Allocation.objects.filter(state__in=HOLDING_STATES, ends_at__gt=now, starts_at__lt=horizon,
                                  cluster_id__in=cluster_ids, flavor__gpu_model=allocation.flavor.gpu_model)
    moments: set[datetime.datetime] = set()
    for starts_at, ends_at, deadline in rows.values_list("starts_at", "ends_at", "reclaim_deadline").order_by():
        moments.update(moment for moment in (starts_at, ends_at, deadline) if moment is not None)
    begins: set[datetime.datetime] = set()
    for found in QuotaView.read(parents=parents).specs.values():
        for edge in windows.edges(found, now, horizon):
            (begins if edge.kind == "begin" else moments).add(edge.at)
    return (sorted(moment for moment in moments if now < moment < horizon)[:MOMENTS],
            sorted(moment for moment in begins if now < moment < horizon)[:WINDOW_BEGINS])


def moved(allocation: Allocation, start: datetime.datetime) -> Allocation:
    """The same request (unsaved), starting at ``start`` for the same duration."""
    copy = Allocation(
        pk=allocation.pk, project=allocation.project, flavor=allocation.flavor, quantity=allocation.quantity,
        priority_class=allocation.priority_class, cluster=allocation.cluster, starts_at=start,
        ends_at=start + (allocation.ends_at - allocation.starts_at), state=allocation.state,
        requested_by_id=allocation.requested_by_id,
    )
    return copy


RELIABILITY = (
    "Admission's own verdict on the request moved to that moment, from the current state: exact if grants end "
    "when they are due, no request is approved before it and no new window or grant appears. Grants released "
    "early make it sooner; renewals, requests ahead in the queue and new grants make it later."
)


def earliest_start(*, allocation: Allocation, decide: Decide, cluster_ids: list[int],
                   now: datetime.datetime | None = None, parents: dict[int, int | None] | None = None) -> Estimate:
    """The earliest change moment at which admission would admit the request moved there: halving
    among the moments where grants end or start, and each of the nearest windows' begins tried."""
    now = now or clock_now()
    after = max(now, allocation.starts_at)
    found, begins = change_moments(allocation=allocation, cluster_ids=cluster_ids, now=now, parents=parents)
    moments = [moment for moment in found if moment > after]
    tried = 0
    fits: list[datetime.datetime] = []
    for begin in (moment for moment in begins if moment > after):
        tried += 1
        if decide(moved(allocation, begin)).admitted:
            fits.append(begin)
            break
    earliest, searched = _halving(allocation, decide, [moment for moment in moments if not fits or moment < fits[0]])
    tried += searched
    fits += [earliest] if earliest is not None else []
    if not fits:
        return Estimate(None, f"It does not fit at any of the next {len(moments) + len(begins)} moments where "
                        "something changes (within 30 days).", RELIABILITY, tried=tried)
    return Estimate(min(fits), "The earliest moment at which admission would admit it, found among "
                    f"{len(moments) + len(begins)} moments where what holds or a limit changes.", RELIABILITY, tried=tried)


def _halving(allocation: Allocation, decide: Decide,
             moments: list[datetime.datetime]) -> tuple[datetime.datetime | None, int]:
    """The first of ``moments`` admission admits the request at, taking later as never worse; and
    how many decisions it took."""
    verdicts: dict[int, bool] = {}

    def admitted(index: int) -> bool:
        if index not in verdicts:
            verdicts[index] = decide(moved(allocation, moments[index])).admitted
        return verdicts[index]

    if not moments or not admitted(len(moments) - 1):
        return None, len(verdicts)
    index = bisect_left(range(len(moments)), True, key=admitted)
    return moments[index], len(verdicts)

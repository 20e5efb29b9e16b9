"""Writes of fair share: the decay tick and the audited change of a department's shares.

``fair_share_tick(now)``: for every department, ``usage ← decayed(usage, now - as_of) + what its own
projects held in (as_of, now]``, each moment decayed by its age (``tree.held_decayed``). *Held* is
exactly what the usage roll-up counts as granted (``allocations.catalogue.selectors.reservations_held_between``:
a reservation live inside its allocation's period, weighted by the flavor's GPU-equivalents, one
unit's overlapping rows once). A department never counted before starts ``FIRST_SPAN_HALF_LIVES``
half-lives back, where usage weighs less than a thousandth. A department already counted up to
``now`` or later is left alone, so a tick that comes twice, or late after a newer one, changes
nothing. What was held is read as the database says at the tick: history written later with
earlier dates (not something the workflow does) is not counted.

The tick runs in one transaction under its own advisory lock, which ``fair_share_shares_set`` takes
too, first (``kernel.locks``: it stands apart). It is not audited: the usage is derived from audited
grants and can be made again (from the reservations, integrating from scratch).
"""

from __future__ import annotations

import datetime
import math
from collections import defaultdict
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction

from allocations.catalogue.selectors import reservations_held_between
from allocations.fair_share.reads import half_life_seconds
from allocations.fair_share.tree import decayed, held_decayed
from allocations.models.fair_share import SHARES_MAX, FairShare
from audit import actions
from audit.services import audit_record
from kernel.clock import clock_now
from kernel.errors import FieldError
from kernel.intervals import Interval, merged
from kernel.locks import advisory_xact_lock
from tenants.access import require_platform_admin
from tenants.models import Department

User = AbstractBaseUser | AnonymousUser
FAIR_SHARE_LOCK_ID = 0x6770_7561_6673_0001  # pg_advisory_xact_lock key of the fair-share tick and of shares changes
FIRST_SPAN_HALF_LIVES = 10
_HELD_FIELDS = ("allocation__project__department_id", "allocation_id", "unit", "allocation__flavor__gpu_equivalents")


@dataclass(frozen=True)
class TickOutcome:
    now: datetime.datetime
    departments: int  # usages decayed and added to
    intervals: int  # held intervals counted (a unit's, merged)

    def as_dict(self) -> dict[str, object]:
        return {"now": self.now.isoformat(), "departments": self.departments, "intervals": self.intervals}


def _held(
    *, since: dict[int, datetime.datetime], now: datetime.datetime, half_life: float
) -> tuple[dict[int, float], int]:
    """Department → decayed GPU-equivalent-hours its own projects held in (since[department], now];
    and how many intervals that was. ``math.fsum``: the same whatever order the rows come in."""
    units: dict[tuple[int, int, int], list[Interval]] = defaultdict(list)
    weights: dict[int, float] = {}
    rows = reservations_held_between(start=min(since.values()), end=now, fields=_HELD_FIELDS)
    for begin, finish, (department_id, allocation_id, unit, gpu_equivalents) in rows:
        if department_id in since:
            units[(department_id, allocation_id, unit)].append((max(begin, since[department_id]), min(finish, now)))
            weights[allocation_id] = float(gpu_equivalents)
    terms: dict[int, list[float]] = defaultdict(list)
    for (department_id, allocation_id, _unit), intervals in units.items():
        for begin, finish in merged(intervals):
            terms[department_id].append(held_decayed(
                weights[allocation_id], began_s_ago=(now - begin).total_seconds(),
                ended_s_ago=(now - finish).total_seconds(), half_life_s=half_life,
            ))  # fmt: skip
    return {department_id: math.fsum(found) for department_id, found in terms.items()}, sum(map(len, terms.values()))


def fair_share_tick(*, now: datetime.datetime | None = None) -> TickOutcome:
    """Decay every department's usage to ``now`` and add what its own projects held since its last
    tick. Three queries and two writes, whatever the number of departments."""
    now = now or clock_now()
    half_life = half_life_seconds()
    first = now - datetime.timedelta(seconds=half_life * FIRST_SPAN_HALF_LIVES)
    with transaction.atomic():
        advisory_xact_lock(transaction.get_connection(), FAIR_SHARE_LOCK_ID)
        rows = {row.department_id: row for row in FairShare.objects.all()}
        since: dict[int, datetime.datetime] = {}
        for department_id in Department.objects.values_list("id", flat=True):
            row = rows.get(department_id)
            begin = row.as_of if row is not None and row.as_of is not None else first
            if begin < now:
                since[department_id] = begin
        if not since:
            return TickOutcome(now=now, departments=0, intervals=0)
        added, intervals = _held(since=since, now=now, half_life=half_life)
        written = clock_now()
        new: list[FairShare] = []
        changed: list[FairShare] = []
        for department_id in sorted(since):
            row = rows.get(department_id) or FairShare(department_id=department_id)
            (changed if department_id in rows else new).append(row)
            before = 0.0 if row.as_of is None else decayed(row.usage, (now - row.as_of).total_seconds(), half_life)
            row.usage, row.as_of, row.updated_at = before + added.get(department_id, 0.0), now, written
        FairShare.objects.bulk_create(new, batch_size=1000)
        FairShare.objects.bulk_update(changed, ["usage", "as_of", "updated_at"], batch_size=1000)
    return TickOutcome(now=now, departments=len(since), intervals=intervals)


def fair_share_shares_set(*, actor: User, department_id: int, shares: int) -> FairShare:
    """Set a department's shares: its weight among its siblings (platform admins; audited
    ``fair_share.shares_set``). Setting the shares it has changes and records nothing."""
    require_platform_admin(actor, to="set fair-share shares")
    if isinstance(shares, bool) or not isinstance(shares, int) or not 1 <= shares <= SHARES_MAX:
        raise FieldError("shares", f"A whole number from 1 to {SHARES_MAX}.")
    with transaction.atomic():
        advisory_xact_lock(transaction.get_connection(), FAIR_SHARE_LOCK_ID)  # first: it stands apart
        department = Department.objects.filter(pk=department_id).first()
        if department is None:
            raise FieldError("department", f"No department {department_id}.")
        row, _ = FairShare.objects.get_or_create(department=department)
        if row.shares == shares:
            return row
        before = {"shares": row.shares}
        row.shares = shares
        row.save(update_fields=["shares", "updated_at"])
        audit_record(actor=actor, action=actions.FAIR_SHARE_SHARES_SET, target=row, department_id=department.pk,
                     before=before, after={"shares": shares, "department": department.slug})  # fmt: skip
    return row

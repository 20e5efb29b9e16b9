"""Reads of fair share: every department's shares, decayed usage and Fair Tree standing (the
table), the factor that orders its requests in the approvals queue and its borrowed grants among
victims of equal priority, and the table as one user may read it.

Departments are the tree's nodes. A department with sub-departments takes part among its children
with a virtual leaf, its **own projects** (1 share, its own projects' usage), so that requests of
its own projects get a rank too; a department without sub-departments is a leaf itself. Every
department's usage is decayed to the same moment, so the ranking does not depend on when it is
read between two ticks (decaying every usage by the same factor changes no ``U``).
"""

from __future__ import annotations

import datetime
import math
from collections import defaultdict
from dataclasses import dataclass, replace

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Case, FloatField, QuerySet, Value, When
from django.http import Http404

from allocations.fair_share.queue import NO_FACTOR
from allocations.fair_share.tree import decayed, department_forest, fair_tree
from allocations.models import Allocation
from allocations.models.fair_share import FairShare
from kernel.conf import setting_int
from tenants.access import access_for
from tenants.models import Department

User = AbstractBaseUser | AnonymousUser


def half_life_hours() -> int:
    """``GPUPORTAL_FAIR_SHARE_HALF_LIFE_HOURS``: usage weighs half as much this much later."""
    return setting_int("GPUPORTAL_FAIR_SHARE_HALF_LIFE_HOURS")


def half_life_seconds() -> float:
    return half_life_hours() * 3600.0


@dataclass(frozen=True)
class FairShareRow:
    """A department, or a department's own projects (``own_projects``), among its siblings."""

    department_id: int
    slug: str
    name: str
    parent_id: int | None
    depth: int
    own_projects: bool
    shares: int
    share: float  # S: shares / Σ siblings' shares
    usage: float  # decayed GPU-equivalent-hours (a department with sub-departments: its whole subtree's)
    usage_share: float  # U: usage / Σ siblings' usage
    level_fs: float | None  # LF = S / U; None when U is 0 (infinite)
    rank: int | None  # leaves only: a department without sub-departments, or own projects
    factor: float | None  # rank / leaf_count; the best is 1.0

    @property
    def ranked(self) -> bool:
        return self.rank is not None


@dataclass(frozen=True)
class FairShareStanding:
    """Where a department's own requests and grants stand: its leaf's rank and factor."""

    rank: int
    factor: float
    leaf_count: int


@dataclass(frozen=True)
class FairShareTable:
    rows: list[FairShareRow]  # the tree depth-first, siblings by slug, own projects first
    leaf_count: int
    now: datetime.datetime
    as_of: datetime.datetime | None  # the last tick
    half_life_hours: int

    def standings(self) -> dict[int, FairShareStanding]:
        """Department id → the standing of its own projects (its own row when it has no sub-departments)."""
        return {
            row.department_id: FairShareStanding(rank=row.rank, factor=row.factor, leaf_count=self.leaf_count)
            for row in self.rows if row.rank is not None and row.factor is not None
        }


def fair_share_table(*, now: datetime.datetime) -> FairShareTable:
    """Every department's standing, usage decayed to ``now``. Two queries."""
    half_life = half_life_seconds()
    departments = list(Department.objects.order_by("slug").values_list("id", "slug", "name", "parent_id"))
    state = {row[0]: row[1:] for row in FairShare.objects.values_list("department_id", "shares", "usage", "as_of")}
    shares: dict[int, int] = {}
    usage: dict[int, float] = {}
    for department_id, *_ in departments:
        count, used, as_of = state.get(department_id, (1, 0.0, None))
        shares[department_id] = count
        usage[department_id] = 0.0 if as_of is None else decayed(used, max((now - as_of).total_seconds(), 0.0),
                                                                 half_life)
    children: dict[int | None, list[int]] = defaultdict(list)
    for department_id, _, _, parent_id in departments:
        children[parent_id].append(department_id)

    ranking = fair_tree(department_forest(children, shares, usage))
    names = {department_id: (slug, name, parent_id) for department_id, slug, name, parent_id in departments}
    rows: list[FairShareRow] = []
    stack: list[tuple[tuple[str, int], int]] = [(("department", root), 0) for root in reversed(children.get(None, []))]
    while stack:
        key, depth = stack.pop()
        kind, department_id = key
        standing = ranking.standings[key]
        slug, name, parent_id = names[department_id]
        own = kind == "own"
        rows.append(FairShareRow(
            department_id=department_id, slug=slug, name="own projects" if own else name,
            parent_id=department_id if own else parent_id, depth=depth, own_projects=own,
            shares=1 if own else shares[department_id], share=standing.share, usage=standing.usage,
            usage_share=standing.usage_share, level_fs=None if math.isinf(standing.level_fs) else standing.level_fs,
            rank=standing.rank, factor=standing.factor,
        ))  # fmt: skip
        if not own and children.get(department_id):
            below = [("own", department_id), *(("department", kid) for kid in children[department_id])]
            stack.extend((child, depth + 1) for child in reversed(below))
    as_of = max((row[2] for row in state.values() if row[2] is not None), default=None)
    return FairShareTable(rows=rows, leaf_count=ranking.leaf_count, now=now, as_of=as_of,
                          half_life_hours=half_life_hours())


def fair_share_factors(*, now: datetime.datetime) -> dict[int, float]:
    """Department id → the Fair Tree factor of its own projects (1.0: the least served for its
    shares, first in line; the lowest: the most over its share). Two queries."""
    return {department_id: standing.factor for department_id, standing in fair_share_table(now=now).standings().items()}


def fair_share_table_for(*, user: User, now: datetime.datetime) -> FairShareTable:
    """The table as ``user`` may read it: the rows of the departments they read (every row for
    platform admins and auditors of the root); no role at all: 404. Ranks stay the whole tree's."""
    access = access_for(user)
    if not access.has_any_role:
        raise Http404("No fair share to show.")
    table = fair_share_table(now=now)
    if access.reads_everything:
        return table
    return replace(table, rows=[row for row in table.rows if access.can_read_department(row.department_id)])


def fair_share_department_get(*, user: User, department_id: int) -> Department:
    """The department, if ``user`` may read it (else 404: an outsider cannot tell it exists)."""
    department = Department.objects.filter(pk=department_id).first()
    if department is None or not access_for(user).can_read_department(department_id):
        raise Http404("No such department.")
    return department


def pending_in_queue_order(pending: QuerySet[Allocation], *, factors: dict[int, float]) -> QuerySet[Allocation]:
    """``pending`` in the queue's order (``allocations.fair_share.queue.queue_key``, here in SQL so
    that a limit keeps the requests that come first): the higher priority class, then the higher
    fair-share factor of the request's department (``factors``: ``fair_share_factors``), then the
    oldest, then the lowest id."""
    by_factor: dict[float, list[int]] = defaultdict(list)
    for department_id, factor in factors.items():
        by_factor[factor].append(department_id)
    factor_of = Case(
        *(When(project__department_id__in=ids, then=Value(factor)) for factor, ids in sorted(by_factor.items())),
        default=Value(NO_FACTOR), output_field=FloatField(),
    )  # fmt: skip
    return pending.annotate(fair_share_factor=factor_of).order_by(
        "-priority_class__value", "-fair_share_factor", "created_at", "id"
    )

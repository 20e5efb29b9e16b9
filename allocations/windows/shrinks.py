"""What a quota window's edge does to its quota, read-only: the effective numbers on either side
of it, the grants a lowered limit leaves beyond it, and the shrinks coming soon with their owners
(the portal's calendar and ``GET /api/v1/quota-windows/shrinks/``). The tick
(``allocations.windows.tick``) acts on them.

Which grants a shrink hits: those that hold at the edge (not already being reclaimed) in the
quota's department and below, chosen as admission chooses victims (``algebra.plan`` for a request
of nothing, with only that department's limit in the scope the window changes): the grants beyond
the new limit in priority order (highest first, then oldest) first, then the lowest priority and
newest, the fewest that bring the department within the new limit. With shrink policy ``reclaim``
the tick reclaims them (with their notice); with ``wait`` they run to their end.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.db.models import Q

from allocations.admission.planning import VictimInfo, grants_at, quota_tree, victim_infos
from allocations.models import Allocation, Quota
from allocations.models.windows import QuotaWindow, WindowKind, WindowState
from allocations.quotas import algebra, windows
from allocations.quotas.shrinking import shrink_plan, shrink_scope
from allocations.quotas.wording import scope_words
from kernel.clock import clock_now
from kernel.numbers import plain
from tenants.access import department_ancestor_ids, department_parent_map, department_subtree_ids
from tenants.models import Project

MICROSECOND = datetime.timedelta(microseconds=1)
WARN_WITHIN = datetime.timedelta(minutes=30)
HOUR = datetime.timedelta(hours=1)


@lru_cache(maxsize=32768)
def _spec_edges(
    spec: windows.WindowSpec, start: datetime.datetime, end: datetime.datetime, budget: int
) -> tuple[windows.Edge, ...]:
    return tuple(windows.edges([spec], start, end, budget=budget))


SPEC_FIELDS = ("pk", "quota_id", "kind", "begins_at", "ends_at", "rrule", "timezone", "duration_minutes",
               "guaranteed_delta", "limit_delta", "guaranteed", "limit", "priority_class_id")


def specs_between(since: datetime.datetime, until: datetime.datetime) -> dict[int, list[windows.WindowSpec]]:
    """Quota id → its approved windows that may be in force, or have an edge, in ``[since, until]``
    (past festivals left out in the query; plain rows, not models: the tick reads this every 30 s)."""
    rows = (QuotaWindow.objects.filter(state=WindowState.APPROVED, begins_at__lte=until)
            .filter(Q(kind=WindowKind.RECURRING) | Q(ends_at__gte=since)).order_by("pk").values_list(*SPEC_FIELDS))
    out: dict[int, list[windows.WindowSpec]] = defaultdict(list)
    for pk, quota_id, kind, begins, ends, rule, zone, minutes, g_delta, l_delta, guaranteed, limit, class_id in rows:
        out[quota_id].append(windows.WindowSpec(
            id=pk, kind=kind, begins_at=begins, ends_at=ends, rrule=rule, timezone=zone or "UTC",
            duration=datetime.timedelta(minutes=minutes) if minutes else None, guaranteed_delta=g_delta,
            limit_delta=l_delta, guaranteed=guaranteed, limit=limit, priority_class_id=class_id,
        ))
    return dict(out)


def edges_between(
    specs: Iterable[windows.WindowSpec], start: datetime.datetime, end: datetime.datetime, *,
    budget: int = windows.BUDGET,
) -> list[windows.Edge]:
    """``windows.edges`` of these windows in ``[start, end)``, each window's computed over the whole
    hours around it and remembered: the tick asks about the same hours every 30 seconds, and a
    recurring window's edges cost a walk of its rule (an approved window never changes: a changed
    one is another key). ``budget``: what each window's evaluation takes up at most (a list of
    coming shrinks asks for a page's, ``windows.PAGE_BUDGET``)."""
    low = start.astimezone(datetime.UTC).replace(minute=0, second=0, microsecond=0)
    high = end.astimezone(datetime.UTC).replace(minute=0, second=0, microsecond=0) + HOUR
    found = [edge for spec in specs for edge in _spec_edges(spec, low, high, budget) if start <= edge.at < end]
    return sorted(found, key=lambda edge: (edge.at, edge.kind != "end", edge.window_id))


def numbers(value: windows.Effective) -> dict[str, Any]:
    """The effective numbers as an edge records them (audit before/after, ``QuotaWindowEdge``)."""
    return {"guaranteed": plain(value.guaranteed), "limit": plain(value.limit),
            "guaranteed_by": value.guaranteed_by, "limit_by": value.limit_by}


def window_scope(window: QuotaWindow) -> algebra.Scope:
    """The scope a window changes: its quota's, or its priority class's share of it."""
    if window.priority_class_id is not None:
        return algebra.class_scope(window.priority_class_id, window.quota.flavor_id)
    return window.quota.flavor_id


def scope_label(window: QuotaWindow) -> str:
    flavor = window.quota.flavor.name if window.quota.flavor is not None else ""
    label = window.priority_class.name if window.priority_class is not None else ""
    return scope_words(window_scope(window), flavor=flavor, priority_class=label)


def edge_numbers(
    *, quota: Quota, specs: list[windows.WindowSpec], at: datetime.datetime, priority_class_id: int | None,
    gone: windows.WindowSpec | None = None,
) -> tuple[windows.Effective, windows.Effective]:
    """The effective numbers just before the edge at ``at`` and from it on. ``gone``: a window
    cancelled while in force, whose end is this edge (before: with it; after: without it)."""
    def at_moment(found: list[windows.WindowSpec], moment: datetime.datetime) -> windows.Effective:
        return windows.effective(guaranteed=quota.guaranteed, limit=quota.limit, windows=found, at=moment,
                                 priority_class_id=priority_class_id)
    if gone is not None:
        return at_moment([*specs, gone], at), at_moment(specs, at)
    return at_moment(specs, at - MICROSECOND), at_moment(specs, at)


def shrink_victims(
    *, department_id: int, scope: algebra.Scope, at: datetime.datetime, untakeable: Iterable[int] = ()
) -> tuple[list[VictimInfo], bool]:
    """The grants holding at ``at`` that keep the department beyond its effective limit in
    ``scope`` there, in the order they would be taken; and whether taking them brings it within
    (False: grants that may not be taken, ``untakeable``, stand in the way; then none are listed)."""
    parents = department_parent_map()
    tree = quota_tree(parents=parents, start=at, end=at + MICROSECOND)
    if (department_id, shrink_scope(tree, department_id=department_id, scope=scope)) not in tree.limits:
        return [], True
    above = set(department_ancestor_ids(department_id=department_id, parents=parents)) - {department_id}
    subtree = department_subtree_ids(root_ids=[department_id], parents=parents)
    grants, info = grants_at(at=at, department_ids=subtree, tree=tree, untakeable=untakeable)
    plan = shrink_plan(tree, grants, department_id=department_id, scope=scope, above=above)
    assert plan is not None  # the department has a limit there (above)
    return victim_infos(plan.victims, info), plan.admitted


@dataclass(frozen=True)
class AtRisk:
    """A grant a coming shrink leaves beyond the new limit, and who to tell."""

    victim: VictimInfo
    ends_at: datetime.datetime
    requested_by: str
    members: tuple[str, ...]


@dataclass(frozen=True)
class ComingShrink:
    window: QuotaWindow
    at: datetime.datetime
    kind: str  # the window's "begin" or "end"
    scope: str  # as people read it
    before: windows.Effective
    after: windows.Effective
    grants: tuple[AtRisk, ...]

    @property
    def owners(self) -> list[str]:
        return sorted({name for grant in self.grants for name in (grant.requested_by, *grant.members) if name})


def _owners(victims: list[VictimInfo]) -> list[AtRisk]:
    ids = [victim.allocation_id for victim in victims]
    rows = {pk: (ends_at, username, project_id) for pk, ends_at, username, project_id in
            Allocation.objects.filter(pk__in=ids).values_list("pk", "ends_at", "requested_by__username", "project_id")}
    members: dict[int, list[str]] = defaultdict(list)
    through = Project.members.through.objects.filter(project_id__in={row[2] for row in rows.values()})
    for project_id, username in through.values_list("project_id", "user__username").order_by("user__username"):
        members[project_id].append(username)
    return [AtRisk(victim, rows[victim.allocation_id][0], rows[victim.allocation_id][1],
                   tuple(members[rows[victim.allocation_id][2]])) for victim in victims]


def quota_window_shrinks_coming(
    *, now: datetime.datetime | None = None, within: datetime.timedelta = WARN_WITHIN,
    department_ids: Iterable[int] | None = None, specs: dict[int, list[windows.WindowSpec]] | None = None,
    budget: int = windows.BUDGET,
) -> list[ComingShrink]:
    """The edges in ``(now, now + within]`` after which a quota (or a class's share of it) is
    lower than before, in time order, each with the grants it would leave beyond its new limit
    (the ones a ``reclaim`` policy takes; under ``wait`` they keep running) and their owners (who
    requested them, the project's members). ``department_ids``: only the quotas of these departments.
    ``specs``: the windows, when the caller read them already (``specs_between``). ``budget``: as
    ``edges_between``'s."""
    moment = now or clock_now()
    if specs is None:
        specs = specs_between(moment, moment + within + MICROSECOND)
    due = [(edge, quota_id) for quota_id, found in specs.items()
           for edge in edges_between(found, moment + MICROSECOND, moment + within + MICROSECOND, budget=budget)]
    if not due:
        return []
    wanted = set(department_ids) if department_ids is not None else None
    quotas = {quota.pk: quota for quota in Quota.objects.filter(pk__in={quota_id for _, quota_id in due})
              .select_related("department", "flavor") if wanted is None or quota.department_id in wanted}
    due = [(edge, quota_id) for edge, quota_id in due if quota_id in quotas]
    rows = {row.pk: row for row in QuotaWindow.objects.filter(pk__in={edge.window_id for edge, _ in due})
            .select_related("quota__department", "quota__flavor", "priority_class", "requested_by")}
    out = []
    for edge, quota_id in sorted(due, key=lambda item: (item[0].at, item[0].window_id, item[0].kind)):
        window = rows[edge.window_id]
        before, after = edge_numbers(quota=quotas[quota_id], specs=specs[quota_id], at=edge.at,
                                     priority_class_id=window.priority_class_id)
        if after.limit >= before.limit and after.guaranteed >= before.guaranteed:
            continue
        victims: list[VictimInfo] = []
        if after.limit < before.limit:
            victims, _ = shrink_victims(department_id=window.quota.department_id, scope=window_scope(window), at=edge.at)
        out.append(ComingShrink(window=window, at=edge.at, kind=edge.kind, scope=scope_label(window), before=before,
                                after=after, grants=tuple(_owners(victims))))
    return out

"""Quota use for display: what a department's subtree holds at an instant and over an interval,
with the numbers in force (docs/quotas.md, "In use, at an instant and over an interval").

At an instant (``at``, default now) a quota's *in use* is the sum of the grants that hold then
(``allocations.quotas.in_use``: their interval contains it) and its *effective* numbers are the
ones its approved windows leave then (``allocations.quotas.windows.effective``). Over an interval
the use is a step function (``QuotaSpan.segments``) whose peak is the most held at any one moment,
never the sum of grants that do not overlap. Admission itself decides in
``allocations.admission.planning`` (``admission_decide``), and its checks are the only verdict on a
request's quotas: the request form, the approvals queue and the placement preview show them, with
the segments of what holds within each (``checks_with_segments``), never a verdict of their own.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import DecimalField, ExpressionWrapper, F, Q, QuerySet, Sum
from django.db.models.functions import Coalesce

from allocations.catalogue.states import HOLDING_STATES
from allocations.models import Allocation, Flavor, Quota
from allocations.quotas import in_use as timed
from allocations.quotas import windows
from allocations.quotas.window_reading import approved_window_specs
from kernel.clock import clock_now
from kernel.numbers import plain
from kernel.reads import SharedReads
from tenants.access import DepartmentTree, department_tree

_GPU_EQ = ExpressionWrapper(F("quantity") * F("flavor__gpu_equivalents"), output_field=DecimalField(max_digits=14, decimal_places=4))
_HELD_FIELDS = ("project__department_id", "flavor_id", "flavor__gpu_equivalents", "quantity", "priority_class_id",
                "starts_at", "ends_at")
Span = tuple[datetime.datetime, datetime.datetime]


def holding_allocations() -> QuerySet[Allocation]:
    return Allocation.objects.filter(state__in=HOLDING_STATES)


def holding_at(at: datetime.datetime) -> QuerySet[Allocation]:
    """The grants that hold at ``at``: a holding state, and an interval that contains ``at``."""
    return holding_allocations().filter(starts_at__lte=at, ends_at__gt=at)


def department_usage(
    *, department_ids: frozenset[int], flavor: Flavor | None, at: datetime.datetime | None = None
) -> Decimal:
    """Units of ``flavor`` (or GPU-equivalents when None) that projects in these departments hold
    at ``at`` (default now)."""
    queryset = holding_at(at or clock_now()).filter(project__department_id__in=department_ids)
    if flavor is not None:
        total = queryset.filter(flavor=flavor).aggregate(total=Coalesce(Sum("quantity"), 0))["total"]
        return Decimal(total)
    total = queryset.aggregate(total=Sum(_GPU_EQ))["total"]
    return Decimal(total or 0)


def department_usages(
    *, scopes: list[tuple[frozenset[int], int | None]], at: datetime.datetime | None = None
) -> list[Decimal]:
    """What :func:`department_usage` returns for each (department ids, flavor id or None), in one
    query: what holds at ``at`` summed per department and flavor in SQL, then added up per scope
    (exact: the units are integers and the GPU-equivalents decimals of four places)."""
    if not scopes:
        return []
    departments = frozenset().union(*(department_ids for department_ids, _ in scopes))
    held = (
        holding_at(at or clock_now()).filter(project__department_id__in=sorted(departments)).order_by()
        .values_list("project__department_id", "flavor_id").annotate(units=Sum("quantity"), equivalents=Sum(_GPU_EQ))
    )  # fmt: skip
    rows = list(held)
    found = []
    for department_ids, flavor_id in scopes:
        if flavor_id is not None:
            units = sum(units for department, flavor, units, _ in rows if flavor == flavor_id and department in department_ids)
            found.append(Decimal(units))
        else:
            equivalents = [amount for department, _, _, amount in rows if department in department_ids and amount is not None]
            found.append(sum(equivalents[1:], equivalents[0]) if equivalents else Decimal(0))
    return found


@dataclass(frozen=True)
class QuotaUsage:
    """One quota at an instant: what its department's subtree holds then, and its numbers in force."""

    quota: Quota
    in_use: Decimal
    at: datetime.datetime
    effective: windows.Effective

    @property
    def effective_limit(self) -> Decimal:
        return self.effective.limit

    @property
    def effective_guaranteed(self) -> Decimal:
        return self.effective.guaranteed

    @property
    def limit_by(self) -> int | None:
        return self.effective.limit_by

    @property
    def available(self) -> Decimal:
        return max(self.effective.limit - self.in_use, Decimal(0))

    @property
    def borrowed(self) -> Decimal:
        """What the department uses beyond its guarantee: capacity lent by others, which may be reclaimed."""
        return max(self.in_use - self.effective.guaranteed, Decimal(0))


def _subtrees(quotas: list[Quota], tree: DepartmentTree) -> list[frozenset[int]]:
    return [tree.subtree(quota.department_id) for quota in quotas]


def _shared(
    reads: SharedReads | None, tree: DepartmentTree | None
) -> tuple[DepartmentTree, dict[int, list[windows.WindowSpec]]]:
    """The department tree (``tree``: the one the request's access check read) and the approved
    windows, read once per ``reads``."""
    reads = reads if reads is not None else SharedReads()
    tree = tree if tree is not None else reads.once(("tree",), department_tree)
    return tree, reads.once(("approved windows",), approved_window_specs)


def quota_usages(
    *, quotas: list[Quota], at: datetime.datetime | None = None, reads: SharedReads | None = None,
    tree: DepartmentTree | None = None,
) -> list[QuotaUsage]:  # fmt: skip
    """Each quota at ``at`` (default now): three queries, however many quotas (one, with ``reads``
    that read the tree and the windows already, or a ``tree`` and such ``reads``)."""
    if not quotas:
        return []
    at = at or clock_now()
    tree, specs = _shared(reads, tree)
    subtrees = _subtrees(quotas, tree)
    used = department_usages(scopes=[(ids, quota.flavor_id) for ids, quota in zip(subtrees, quotas, strict=True)], at=at)
    return [
        QuotaUsage(quota=quota, in_use=amount, at=at, effective=windows.effective(
            guaranteed=quota.guaranteed, limit=quota.limit, windows=specs.get(quota.pk, []), at=at))
        for quota, amount in zip(quotas, used, strict=True)
    ]


@dataclass(frozen=True)
class QuotaSpan:
    """One quota over ``[start, end)``: the segments of its use and of its numbers in force."""

    quota: Quota
    start: datetime.datetime
    end: datetime.datetime
    segments: tuple[timed.Segment, ...]

    @property
    def peak(self) -> Decimal:
        return timed.peak(self.segments)

    @property
    def lowest_limit(self) -> Decimal:
        return min(segment.effective.limit for segment in self.segments)


def held_rows(*, department_ids: Iterable[int], span: Span | None = None) -> list[dict[str, Any]]:
    """The holding grants of these departments (whose interval meets ``span``, when given): one query."""
    rows = holding_allocations().filter(project__department_id__in=sorted(set(department_ids)))
    if span is not None:
        rows = rows.filter(starts_at__lt=span[1], ends_at__gt=span[0])
    return list(rows.values(*_HELD_FIELDS).order_by("pk"))


def _held(rows: Iterable[dict[str, Any]], *, subtree: frozenset[int], flavor_id: int | None,
          priority_class_id: int | None) -> list[timed.Held]:
    """What each grant weighs in a quota of ``subtree``: its units of the quota's flavor, or its
    GPU-equivalents; only the grants of ``priority_class_id`` for that class's share."""
    out = []
    for row in rows:
        if row["project__department_id"] not in subtree:
            continue
        if priority_class_id is not None and row["priority_class_id"] != priority_class_id:
            continue
        if flavor_id is not None:
            if row["flavor_id"] != flavor_id:
                continue
            amount = Decimal(row["quantity"])
        else:
            amount = row["flavor__gpu_equivalents"] * row["quantity"]
        out.append(timed.Held(row["starts_at"], row["ends_at"], amount))
    return out


def quota_span(
    *, quota: Quota, subtree: frozenset[int], rows: Iterable[dict[str, Any]], specs: list[windows.WindowSpec],
    span: Span, priority_class_id: int | None = None,
) -> QuotaSpan:
    """``quota`` over ``span`` from grant rows (``held_rows``) and its windows (no query)."""
    start, end = span
    steps = windows.timeline(guaranteed=quota.guaranteed, limit=quota.limit, windows=specs, span=span,
                             priority_class_id=priority_class_id)
    held = _held(rows, subtree=subtree, flavor_id=quota.flavor_id, priority_class_id=priority_class_id)
    found = timed.segments(held=held, steps=steps, start=start, end=end)
    return QuotaSpan(quota=quota, start=start, end=end, segments=tuple(found))


def quota_spans(
    *, quotas: list[Quota], start: datetime.datetime, end: datetime.datetime, reads: SharedReads | None = None,
    tree: DepartmentTree | None = None,
) -> list[QuotaSpan]:  # fmt: skip
    """Each quota over ``[start, end)``: three queries, however many quotas (one, with ``reads``
    that read the tree and the windows already, or a ``tree`` and such ``reads``)."""
    if not quotas:
        return []
    tree, specs = _shared(reads, tree)
    subtrees = _subtrees(quotas, tree)
    rows = held_rows(department_ids=frozenset().union(*subtrees), span=(start, end))
    return [quota_span(quota=quota, subtree=subtree, rows=rows, specs=specs.get(quota.pk, []), span=(start, end))
            for quota, subtree in zip(quotas, subtrees, strict=True)]


@dataclass(frozen=True)
class DecidedReads:
    """What a request's decision (``admission_decide``) read already, from which its quota lines'
    segments are cut without reading any of it again: the department tree's parents and slugs,
    the quota rows (``QuotaView.rows``: pk, department, flavor, guaranteed, limit, lending limit)
    and their approved windows by quota, and what the tree's grants hold over the request's
    interval (``department_rows``: grouped, ``units`` the sum of the group's quantities; a segment
    adds the amounts up, so grouped rows give the same segments as one row per grant)."""

    parents: dict[int, int | None]
    slugs: dict[int, str]
    quotas: list[tuple[Any, ...]]
    specs: dict[int, list[windows.WindowSpec]]
    rows: list[dict[str, Any]]


def _decided_quotas(decided: DecidedReads, *, chain: list[int], flavor_id: int) -> dict[tuple[str, int | None], Quota]:
    """The quotas of ``chain`` for the flavor or for GPU-equivalents, from the decision's rows."""
    return {
        (decided.slugs[department_id], quota_flavor): Quota(
            pk=pk, department_id=department_id, flavor_id=quota_flavor, guaranteed=guaranteed, limit=limit,
            lending_limit=lending,
        )
        for pk, department_id, quota_flavor, guaranteed, limit, lending in decided.quotas
        if department_id in chain and quota_flavor in (flavor_id, None)
    }


def checks_with_segments(
    *, allocation: Allocation, checks: list[dict[str, Any]], tree: DepartmentTree | None = None,
    decided: DecidedReads | None = None,
) -> list[dict[str, Any]]:
    """The quota lines of a request's preview (``admission_decide``'s checks) with their time: each
    line's interval (``from``, ``until``: the step of time admission checked it in, or the request's
    whole interval) and, within it, every segment where what holds or the limit in force changes
    (``segments``: ``in_use`` at each moment, never grants that do not overlap added up). Four
    queries; none with ``decided``, what the decision read (only for a request that does not hold
    itself: the decision's grant rows leave the request's own grant out)."""
    if decided is not None:
        tree = DepartmentTree.of(decided.parents)
    tree = tree if tree is not None else department_tree()
    chain = tree.ancestors(allocation.project.department_id)
    whole = (allocation.starts_at, allocation.ends_at)
    rows: list[dict[str, Any]]
    if decided is not None:
        quotas = _decided_quotas(decided, chain=chain, flavor_id=allocation.flavor_id)
        rows = [{**row, "quantity": row["units"]} for row in decided.rows]
        specs = decided.specs
    else:
        scopes = Q(flavor_id=allocation.flavor_id) | Q(flavor__isnull=True)
        quotas = {(quota.department.slug, quota.flavor_id): quota
                  for quota in Quota.objects.filter(scopes, department_id__in=chain).select_related("department")}
        rows = held_rows(department_ids=tree.subtree(*chain[-1:]), span=whole)
        specs = approved_window_specs(quota_ids=[quota.pk for quota in quotas.values()])
    out = []
    for check in checks:
        span = ((datetime.datetime.fromisoformat(check["from"]), datetime.datetime.fromisoformat(check["until"]))
                if "from" in check else whole)
        quota = quotas.get((check["department"], allocation.flavor_id if check["flavor"] is not None else None))
        found = [] if quota is None else quota_span(
            quota=quota, subtree=tree.subtree(quota.department_id), rows=rows,
            specs=specs.get(quota.pk, []), span=span,
            priority_class_id=allocation.priority_class_id if "priority_class" in check else None,
        ).segments
        out.append({**check, "from": span[0], "until": span[1], "segments": [
            {"from": segment.start, "until": segment.end, "in_use": plain(segment.in_use),
             "limit": plain(segment.effective.limit)} for segment in found
        ]})
    return out

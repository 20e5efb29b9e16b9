"""The quota calendar of one department: for each of its quotas, the effective guarantee and limit
over the next ``CALENDAR_DAYS`` days as a step chart (inline SVG, drawn from the geometry here),
the use now, and the coming shrinks with the grants each would leave over the new value.

The numbers come from the pure ``allocations.quotas.windows.timeline`` over the approved windows
(``approved_window_specs``). A quota with windows of one priority class also gets a row for that
class's share (the department's quota changed by that class's windows, ``windows`` module
docstring), whose use and shrinks count only that class's grants.

A *shrink* is a step down of the limit, or of a guarantee a window sets (a guarantee that only
follows a lower limit down, never above it, is not listed on its own). The grants it hits are those holding
the quota at that instant (department subtree, the quota's flavor or GPU-equivalents; a grant being
reclaimed until its deadline); while they weigh more than the new value, the ones admission would
take first (``allocations.quotas.algebra``: lowest priority, then newest) are listed as over it.
Under the window's ``wait`` policy they run to their end and only new admissions are refused;
under ``reclaim`` they are reclaimed with their notice. Shrinks within ``SHRINK_NOTICE`` are the
ones announced now.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from allocations.catalogue.selectors import quota_list
from allocations.catalogue.states import HOLDING_STATES
from allocations.models import Allocation, AllocationState, PriorityClass, Quota
from allocations.models.windows import QuotaWindow
from allocations.quotas.usage import quota_usages
from allocations.quotas.window_reading import approved_window_specs
from allocations.quotas.windows import PAGE_BUDGET, Effective, Step, WindowSpec, timeline
from allocations.quotas.wording import quota_scope_name
from frontend.charts import point
from kernel.numbers import plain
from kernel.times import WEEKDAY, span_utc
from kernel.words import counted
from tenants.access import department_parent_map, department_subtree_ids
from tenants.models import Department

CALENDAR_DAYS = 7
SHRINK_NOTICE = datetime.timedelta(minutes=30)
SHRINKS_SHOWN = 20  # per quota row; a nightly window shrinks once a day
ZERO = Decimal(0)

# Chart geometry (SVG user units): a margin for the y labels, 100 units per day, a band for the days.
LEFT, DAY_WIDTH, TOP, PLOT_HEIGHT, BOTTOM = 44, 100, 8, 110, 26


@dataclass(frozen=True)
class HeldGrant:
    """A grant holding the quota at a shrink, as the calendar lists it."""

    id: int
    project: str
    owner: str
    priority_class: str
    priority: int
    amount: Decimal  # in the quota's unit
    what: str  # "2 × a100"
    starts_at: datetime.datetime
    until: datetime.datetime  # its end, or its reclaim deadline


@dataclass(frozen=True)
class Shrink:
    at: datetime.datetime
    field: str  # "limit" or "guaranteed"
    before: Decimal
    after: Decimal
    held: Decimal
    window_id: int | None
    policy: str  # the window's shrink policy ("wait" or "reclaim"); "" when unknown
    soon: bool  # within SHRINK_NOTICE: announced now
    over: tuple[HeldGrant, ...]

    @property
    def field_label(self) -> str:
        return "limit" if self.field == "limit" else "guarantee"


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    limit_points: str
    guaranteed_points: str
    use_y: str
    days: tuple[tuple[str, str], ...]  # (x, label) at each midnight UTC
    ticks: tuple[tuple[str, str], ...]  # (y, label)
    plot_left: int
    plot_right: int
    plot_top: int
    plot_bottom: int
    description: str
    step_points: str = ""  # each step's values as a focusable point (frontend.charts.point), escaped there

    @property
    def plot_width(self) -> int:
        return self.plot_right - self.plot_left

    @property
    def plot_height(self) -> int:
        return self.plot_bottom - self.plot_top

    @property
    def label_y(self) -> int:
        return self.plot_bottom + 16


@dataclass(frozen=True)
class CalendarRow:
    quota: Quota
    label: str
    unit: str
    priority_class: PriorityClass | None  # the class whose share this row is (None: the whole quota)
    now: Effective
    in_use: Decimal
    steps: tuple[Step, ...]
    chart: Chart
    shrinks: tuple[Shrink, ...]

    @property
    def changes(self) -> bool:
        return len(self.steps) > 1 or self.now.in_force != ()


@dataclass
class Calendar:
    department: Department
    start: datetime.datetime
    end: datetime.datetime
    rows: list[CalendarRow] = field(default_factory=list)
    days: int = CALENDAR_DAYS

    @property
    def shrinks_soon(self) -> list[tuple[CalendarRow, Shrink]]:
        return [(row, shrink) for row in self.rows for shrink in row.shrinks if shrink.soon]


def _fmt(value: Decimal) -> str:
    return plain(value.quantize(Decimal("0.01")))


def _chart_top(values: Sequence[Decimal]) -> Decimal:
    """A round number above every value shown (at least 1)."""
    most = max([*values, Decimal(1)])
    for step in (Decimal(1), Decimal(2), Decimal(5), Decimal(10), Decimal(20), Decimal(50), Decimal(100)):
        if most * Decimal("1.1") <= step * 10:
            return (most * Decimal("1.1") / step).to_integral_value(rounding="ROUND_CEILING") * step
    return (most * Decimal("1.1")).to_integral_value(rounding="ROUND_CEILING")


def chart(*, steps: Sequence[Step], in_use: Decimal, start: datetime.datetime, end: datetime.datetime,
          label: str) -> Chart:
    """The step chart's geometry: polylines of the limit and the guarantee, the use as a level line,
    midnight (UTC) grid lines with their dates, and three value ticks."""
    span = (end - start).total_seconds()
    width = LEFT + DAY_WIDTH * round(span / 86400) + 8
    right = width - 8
    top = _chart_top([*(s.effective.limit for s in steps), in_use])

    def x(moment: datetime.datetime) -> str:
        return f"{LEFT + (right - LEFT) * (moment - start).total_seconds() / span:.1f}"

    def y(value: Decimal) -> str:
        return f"{TOP + PLOT_HEIGHT * float(1 - min(value, top) / top):.1f}"

    def points(name: str) -> str:
        out = []
        for step in steps:
            value: Decimal = getattr(step.effective, name)
            out += [f"{x(step.start)},{y(value)}", f"{x(step.end)},{y(value)}"]
        return " ".join(out)

    midnight = start.astimezone(datetime.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    days = []
    moment = midnight + datetime.timedelta(days=1)
    while moment < end:
        days.append((x(moment), f"{moment:{WEEKDAY}}"))
        moment += datetime.timedelta(days=1)
    ticks = tuple((y(value), _fmt(value)) for value in (ZERO, top / 2, top))
    lows = [s for s in steps if s.effective.limit < steps[0].effective.limit]
    description = (
        f"{label}: limit {_fmt(steps[0].effective.limit)} and guarantee {_fmt(steps[0].effective.guaranteed)} now, "
        f"{_fmt(in_use)} in use; {counted(len(steps), 'step')} over the next "
        f"{round(span / 86400)} days, the limit from {_fmt(min(s.effective.limit for s in steps))} to "
        f"{_fmt(max(s.effective.limit for s in steps))}" + (f", lowered {len(lows)} times" if lows else "") + "."
    )
    step_points = "".join(
        point(label=step_label(step, in_use), x=float(x(step.start)), width=float(x(step.end)) - float(x(step.start)),
              y=TOP, height=PLOT_HEIGHT, first=index == 0)
        for index, step in enumerate(steps)
    )  # fmt: skip
    return Chart(
        width=width, height=TOP + PLOT_HEIGHT + BOTTOM, limit_points=points("limit"),
        guaranteed_points=points("guaranteed"), use_y=y(in_use), days=tuple(days), ticks=ticks,
        plot_left=LEFT, plot_right=right, plot_top=TOP, plot_bottom=TOP + PLOT_HEIGHT, description=description,
        step_points=step_points,
    )


def step_label(step: Step, in_use: Decimal) -> str:
    """One step of the chart in words, as its point tells it on hover and focus: when, the limit and
    the guarantee then, which quota window sets each, and what is in use now."""
    def by(window_id: int | None) -> str:
        return f" (quota window #{window_id})" if window_id is not None else ""

    effective = step.effective
    return (f"{span_utc(step.start, step.end)}: limit {_fmt(effective.limit)}{by(effective.limit_by)}, "
            f"guarantee {_fmt(effective.guaranteed)}{by(effective.guaranteed_by)}; {_fmt(in_use)} in use now")


def _amount(grant: Allocation, quota: Quota) -> Decimal:
    if quota.flavor_id is not None:
        return Decimal(grant.quantity) if grant.flavor_id == quota.flavor_id else ZERO
    return grant.flavor.gpu_equivalents_for(grant.quantity)


def _until(grant: Allocation) -> datetime.datetime:
    if grant.state == AllocationState.RECLAIMING and grant.reclaim_deadline is not None:
        return min(grant.ends_at, grant.reclaim_deadline)
    return grant.ends_at


def _held(grants: Sequence[Allocation], quota: Quota, subtree: frozenset[int],
          priority_class_id: int | None) -> list[HeldGrant]:
    out = []
    for grant in grants:
        if grant.project.department_id not in subtree:
            continue
        if priority_class_id is not None and grant.priority_class_id != priority_class_id:
            continue
        amount = _amount(grant, quota)
        if amount <= 0:
            continue
        owner = grant.requested_by
        out.append(HeldGrant(
            id=grant.pk, project=grant.project.slug, owner=owner.get_full_name() or owner.get_username(),
            priority_class=grant.priority_class.name, priority=grant.priority_class.value, amount=amount,
            what=f"{grant.quantity} × {grant.flavor.name}", starts_at=grant.starts_at, until=_until(grant),
        ))
    return out


def grants_over(held: Sequence[HeldGrant], *, at: datetime.datetime, value: Decimal) -> tuple[Decimal, tuple[HeldGrant, ...]]:
    """What the grants holding at ``at`` weigh, and those over ``value``: lowest priority first,
    then newest, until the rest fit (the order admission takes victims in)."""
    holding = [grant for grant in held if grant.starts_at <= at < grant.until]
    total = sum((grant.amount for grant in holding), ZERO)
    over: list[HeldGrant] = []
    rest = total
    for grant in sorted(holding, key=lambda g: (g.priority, -g.id)):
        if rest <= value:
            break
        over.append(grant)
        rest -= grant.amount
    return total, tuple(over)


def _shrinks(steps: Sequence[Step], held: Sequence[HeldGrant], policies: dict[int, str],
             now: datetime.datetime) -> list[Shrink]:
    out = []
    for previous, step in zip(steps, steps[1:], strict=False):
        for name in ("limit", "guaranteed"):
            before, after = getattr(previous.effective, name), getattr(step.effective, name)
            if after >= before:
                continue
            was_by, now_by = getattr(previous.effective, f"{name}_by"), getattr(step.effective, f"{name}_by")
            if was_by is None and now_by is None:
                continue  # the guarantee only follows a lower limit (it is never above it): not a shrink of its own
            window = was_by if was_by is not None and was_by not in step.effective.in_force else now_by
            total, over = grants_over(held, at=step.start, value=after)
            out.append(Shrink(
                at=step.start, field=name, before=before, after=after, held=total, window_id=window,
                policy=policies.get(window, "") if window is not None else "",
                soon=step.start - now <= SHRINK_NOTICE, over=over,
            ))
    return out


def _grants(subtree: frozenset[int], start: datetime.datetime, end: datetime.datetime) -> list[Allocation]:
    return list(
        Allocation.objects.filter(state__in=HOLDING_STATES, project__department_id__in=subtree,
                                  ends_at__gt=start, starts_at__lt=end)
        .select_related("project", "flavor", "priority_class", "requested_by")
        .order_by("pk")
    )


@dataclass(frozen=True)
class _Holding:
    """What holds in a row's scope: the units in use now and the grants over the calendar."""

    in_use: Decimal
    grants: list[HeldGrant]


def _row(calendar: Calendar, *, quota: Quota, specs: list[WindowSpec], policies: dict[int, str], holding: _Holding,
         priority_class: PriorityClass | None) -> CalendarRow:
    """The row of ``quota`` (of ``priority_class``'s share, when given) over the calendar's days."""
    start, end, in_use, held = calendar.start, calendar.end, holding.in_use, holding.grants
    class_id = priority_class.pk if priority_class is not None else None
    steps = timeline(guaranteed=quota.guaranteed, limit=quota.limit, windows=specs, span=(start, end),
                     priority_class_id=class_id, budget=PAGE_BUDGET)
    label = quota_scope_name(quota.flavor)
    if priority_class is not None:
        label = f"{label}, {priority_class.name}'s share"
    return CalendarRow(
        quota=quota, label=label, unit="units" if quota.flavor_id else "GPU-eq.", priority_class=priority_class,
        now=steps[0].effective, in_use=in_use, steps=tuple(steps),
        chart=chart(steps=steps, in_use=in_use, start=start, end=end, label=label),
        shrinks=tuple(_shrinks(steps, held, policies, start)[:SHRINKS_SHOWN]),
    )


def department_calendar(
    *, user: AbstractBaseUser | AnonymousUser, department: Department, now: datetime.datetime
) -> Calendar:
    """The calendar of ``department`` (call after ``department_get``: the user may read it). A
    handful of queries whatever the number of quotas and windows."""
    end = now + datetime.timedelta(days=CALENDAR_DAYS)
    calendar = Calendar(department=department, start=now, end=end)
    # GPU-equivalents first, then the flavors by name (the database orders NULL either way).
    quotas = sorted(quota_list(user=user, department_id=department.pk),
                    key=lambda quota: (quota.flavor is not None, quota.flavor.name if quota.flavor else ""))
    if not quotas:
        return calendar
    specs = approved_window_specs(quota_ids=[quota.pk for quota in quotas])
    policies = dict(QuotaWindow.objects.filter(quota__in=quotas).values_list("pk", "shrink_policy"))
    class_ids = sorted({spec.priority_class_id for found in specs.values() for spec in found
                        if spec.priority_class_id is not None})
    classes = PriorityClass.objects.in_bulk(class_ids)
    subtree = department_subtree_ids(root_ids=[department.pk], parents=department_parent_map())
    grants = _grants(subtree, now, end)
    for quota, usage in zip(quotas, quota_usages(quotas=quotas, at=now), strict=True):
        mine = specs.get(quota.pk, [])
        held = _held(grants, quota, subtree, None)
        calendar.rows.append(_row(calendar, quota=quota, specs=mine, policies=policies,
                                  holding=_Holding(usage.in_use, held), priority_class=None))
        for class_id in sorted({spec.priority_class_id for spec in mine if spec.priority_class_id is not None}):
            share = _held(grants, quota, subtree, class_id)
            in_use = sum((grant.amount for grant in share if grant.starts_at <= now < grant.until), ZERO)
            calendar.rows.append(_row(calendar, quota=quota, specs=mine, policies=policies,
                                      holding=_Holding(in_use, share), priority_class=classes.get(class_id)))
    return calendar


def calendar_departments(*, user: AbstractBaseUser | AnonymousUser, departments: QuerySet[Department]) -> list[Department]:
    """The departments whose calendars the user may open, those with quotas first."""
    with_quotas = set(quota_list(user=user).values_list("department_id", flat=True))
    return sorted(departments, key=lambda d: (d.pk not in with_quotas, d.slug))

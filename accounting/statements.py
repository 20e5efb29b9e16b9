"""Monthly statements: closed once the month's late data had its margin, then never changed.

``statements_close`` rolls the month's tail again (the last late data counted) and any day the
roll-up missed (``_month_roll``), then writes, for
each department with usage in the month and each currency its hours are priced in, the statement
with its lines (``charges``), their total and SHA-256, and audits ``statement.closed``, in one
transaction per department (a department that already has its statements is left alone, so
closing again changes nothing). ``statements_close_due`` closes the month before ``now`` once
``GPUPORTAL_ACCOUNTING_CLOSE_MARGIN_HOURS`` have passed since it ended. A correction is a line of
its own (``statement_correct``, platform admins, audited): the charge lines and their hash stay.
"""

from __future__ import annotations

import datetime
import operator
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from functools import reduce
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import Count, Max, Q, Sum

from accounting import conf
from accounting.charges import Card, Charges, Hour, charges_from_sums, month_bounds, statement_sha256
from accounting.hours import hours_summed
from accounting.models import LineKind, RateCard, Statement, StatementLine, UsageHour
from accounting.rolling import usage_hours_roll
from allocations.catalogue.selectors import reservations_held_between
from allocations.models import Flavor
from audit import actions
from audit.services import audit_record
from kernel.clock import clock_now
from kernel.errors import FieldError
from kernel.locks import advisory_xact_lock
from kernel.times import MONTH
from tenants.access import require_platform_admin
from tenants.models import Department, Project

User = AbstractBaseUser | AnonymousUser
CLOSE_LOCK_ID = 0x6770_7561_6363_0002  # pg_advisory_xact_lock key of closing statements


def month_of(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime(MONTH)


def department_charges(
    *, department_id: int, start: datetime.datetime, end: datetime.datetime, cards: list[Card] | None = None
) -> dict[str, Charges]:
    """What the department's hours in [start, end) come to, per currency (a draft: nothing stored)."""
    return departments_charges(department_ids=[department_id], start=start, end=end, cards=cards).get(department_id, {})


def departments_charges(
    *, department_ids: list[int], start: datetime.datetime, end: datetime.datetime, cards: list[Card] | None = None
) -> dict[int, dict[str, Charges]]:
    """Each department's charges per currency, its hours in [start, end) summed in SQL per
    project, flavor and card in force (one query for all of them, a few rows per department),
    exactly as ``charges.hour_sums`` sums them one by one (tested against it)."""
    rows = UsageHour.objects.filter(department_id__in=department_ids, hour__gte=start, hour__lt=end)
    if cards is None:
        cards = month_cards(start=start, end=end)
    windows = [
        Q(flavor__name=card.flavor, hour__gte=max(card.valid_from, start), hour__lt=min(card.valid_to or end, end))
        for card in cards
    ]
    annotations: dict[str, Any] = {}
    for index, window in enumerate(windows):
        annotations[f"n{index}"] = Count("pk", filter=window)
        annotations[f"g{index}"] = Sum("granted", filter=window)
        annotations[f"u{index}"] = Sum("used", filter=window)
    unpriced = ~reduce(operator.or_, windows) if windows else Q()
    annotations.update(
        n=Count("pk", filter=unpriced), g=Sum("granted", filter=unpriced), u=Sum("used", filter=unpriced)
    )
    sums: dict[int, dict[tuple[str, str, Card | None], tuple[Decimal, Decimal]]] = defaultdict(dict)
    for row in rows.values("department_id", "project__slug", "flavor__name").annotate(**annotations).order_by():
        found = sums[row["department_id"]]
        key = (row["project__slug"], row["flavor__name"])
        for index, card in enumerate(cards):
            if row[f"n{index}"]:
                found[(*key, card)] = (hours_summed(row[f"g{index}"]), hours_summed(row[f"u{index}"]))
        if row["n"]:
            found[(*key, None)] = (hours_summed(row["g"]), hours_summed(row["u"]))
    return {department_id: charges_from_sums(found) for department_id, found in sums.items()}


def department_hours(*, department_id: int, start: datetime.datetime, end: datetime.datetime) -> list[Hour]:
    """The department's hours one by one (what ``department_charges`` sums in SQL)."""
    rows = UsageHour.objects.filter(department_id=department_id, hour__gte=start, hour__lt=end)
    return [
        Hour(hour, project, flavor, granted, used)
        for hour, project, flavor, granted, used in rows.values_list(
            "hour", "project__slug", "flavor__name", "granted", "used"
        )
    ]


def month_cards(*, start: datetime.datetime, end: datetime.datetime) -> list[Card]:
    """Every rate card in force at some time in [start, end)."""
    found = RateCard.objects.filter(valid_from__lt=end).filter(Q(valid_to__isnull=True) | Q(valid_to__gt=start))
    return [
        Card(
            card.pk,
            card.flavor.name,
            card.price_per_gpu_hour,
            card.currency,
            card.basis,
            card.valid_from,
            card.valid_to,
        )
        for card in found.select_related("flavor").order_by("flavor__name", "valid_from")
    ]


def statements_close(*, period: str, now: datetime.datetime | None = None) -> list[Statement]:
    """Close the month ``period`` (``YYYY-MM``) for every department with usage in it."""
    now = now or clock_now()
    start, end = month_bounds(period)
    if end > now:
        raise FieldError("period", f"{period} has not ended yet.")
    _month_roll(start, end, now=now)
    closed: list[Statement] = []
    to_close = _departments_to_close(start, end)
    # Read once for every department (the month's hours are final once its margin has passed):
    # the cards, the flavors, the departments, their projects and all their charges in one query.
    charges = departments_charges(department_ids=to_close, start=start, end=end, cards=month_cards(start=start, end=end))
    closing = _Closing(start=start, end=end, now=now, flavors=dict(Flavor.objects.values_list("name", "pk")))
    departments = Department.objects.in_bulk(to_close)
    projects: dict[int, dict[str, int]] = defaultdict(dict)
    for department_id, slug, pk in Project.objects.filter(department_id__in=to_close).values_list("department_id", "slug", "pk"):
        projects[department_id][slug] = pk
    for department_id in to_close:
        with transaction.atomic():
            advisory_xact_lock(transaction.get_connection(), CLOSE_LOCK_ID)
            if Statement.objects.filter(department_id=department_id, period_start=start).exists():
                continue  # another close wrote it since the list was read
            found = charges.get(department_id, {})
            for currency in sorted(found):
                closed.append(_statement_write(departments[department_id], found[currency], closing=closing,
                                               projects=projects[department_id]))
    return closed


def statements_close_due(*, now: datetime.datetime | None = None) -> list[Statement]:
    """Close the month before ``now`` once its margin has passed and some department lacks its statements."""
    now = now or clock_now()
    this_month, _ = month_bounds(month_of(now))
    previous = month_of(this_month - datetime.timedelta(days=1))
    start, end = month_bounds(previous)
    if now < end + conf.close_margin():
        return []
    closed = set(
        Statement.objects.filter(period_start=start).order_by().values_list("department_id", flat=True).distinct()
    )
    if not granted_departments(start=start, end=end) - closed:
        return []
    return statements_close(period=previous, now=now)


def _month_roll(start: datetime.datetime, end: datetime.datetime, *, now: datetime.datetime) -> None:
    """Roll again what the periodic roll may not have seen: the month's last late-data margin, and
    every day on which a grant held something but no hour was rolled (the roll-up was not running).
    A month the roll-up kept up with costs only its tail."""
    tail = max(start, end - conf.late_margin())
    rolled = {
        moment.astimezone(datetime.UTC).date()
        for moment in UsageHour.objects.filter(hour__gte=start, hour__lt=end).datetimes(
            "hour", "day", tzinfo=datetime.UTC
        )
    }
    day = start
    while day < tail:
        following = min(tail, day + datetime.timedelta(days=1))
        if day.date() not in rolled and granted_departments(start=day, end=following):
            usage_hours_roll(start=day, end=following, now=now)
        day = following
    usage_hours_roll(start=tail, end=end, now=now)


def granted_departments(*, start: datetime.datetime, end: datetime.datetime) -> set[int]:
    """The departments whose grants held something in [start, end) (read from the reservations, as
    the roll-up reads them, so it does not matter whether the month's hours were rolled yet)."""
    return {
        department_id for _, _, (department_id,)
        in reservations_held_between(start=start, end=end, fields=["allocation__project__department_id"])
    }


def statement_correct(
    *, actor: User, statement_id: int, project_id: int, flavor_id: int, gpu_hours: Decimal, amount: Decimal, reason: str
) -> StatementLine:
    """Add a correction line (an amount, positive or negative, with its reason) to a statement."""
    require_platform_admin(actor, to="correct statements")
    if not reason.strip():
        raise FieldError("reason", "Say why the statement is corrected.")
    with transaction.atomic():
        statement = Statement.objects.select_for_update().filter(pk=statement_id).first()
        if statement is None:
            raise FieldError("statement", f"No statement {statement_id}.")
        project = Project.objects.filter(pk=project_id, department_id=statement.department_id).first()
        if project is None:
            raise FieldError("project", "A project of the statement's department.")
        if not Flavor.objects.filter(pk=flavor_id).exists():
            raise FieldError("flavor", f"No flavor {flavor_id}.")
        number = (statement.lines.aggregate(last=Max("number"))["last"] or 0) + 1
        line = StatementLine.objects.create(
            statement=statement, number=number, kind=LineKind.CORRECTION, project=project, flavor_id=flavor_id,
            basis="granted", gpu_hours=gpu_hours, rate=Decimal(0), amount=amount, reason=reason.strip(),
            created_at=clock_now(),
        )  # fmt: skip
        audit_record(
            actor=actor, action=actions.STATEMENT_CORRECTED, target=statement, department_id=statement.department_id,
            after={"line": number, "project": project.slug, "gpu_hours": str(gpu_hours), "amount": str(amount),
                   "reason": line.reason},
        )  # fmt: skip
    return line


def _departments_to_close(start: datetime.datetime, end: datetime.datetime) -> list[int]:
    # order_by(): the models' default ordering would make DISTINCT run over every hour's row.
    hours = UsageHour.objects.filter(hour__gte=start, hour__lt=end)
    with_usage = set(hours.order_by().values_list("department_id", flat=True).distinct())
    closed = set(
        Statement.objects.filter(period_start=start).order_by().values_list("department_id", flat=True).distinct()
    )
    return sorted(with_usage - closed)


@dataclass(frozen=True)
class _Closing:
    """One close of a month: its bounds, the instant it closes, and the flavors' ids by name."""

    start: datetime.datetime
    end: datetime.datetime
    now: datetime.datetime
    flavors: dict[str, int]


def _statement_write(department: Department, found: Charges, *, closing: _Closing, projects: dict[str, int]) -> Statement:
    start, end, now, flavors = closing.start, closing.end, closing.now, closing.flavors
    sha256 = statement_sha256(
        department=department.slug, period_start=start, currency=found.currency, lines=found.lines
    )
    statement = Statement.objects.create(
        department=department, period_start=start, period_end=end, currency=found.currency, total=found.total,
        sha256=sha256, closed_at=now,
    )  # fmt: skip
    StatementLine.objects.bulk_create([
        StatementLine(
            statement=statement, number=line.number, kind=line.kind, project_id=projects[line.project],
            flavor_id=flavors[line.flavor], rate_card_id=line.rate_card, basis=line.basis, gpu_hours=line.gpu_hours,
            rate=line.rate, amount=line.amount, created_at=now,
        )
        for line in found.lines
    ])  # fmt: skip
    counts: dict[str, int] = defaultdict(int)
    for line in found.lines:
        counts[line.kind] += 1
    audit_record(
        actor=None, action=actions.STATEMENT_CLOSED, target=statement, department_id=department.pk,
        after={"period": month_of(start), "currency": found.currency, "total": str(found.total), "sha256": sha256,
               "lines": dict(counts)},
    )  # fmt: skip
    return statement
